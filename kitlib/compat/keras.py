"""The Keras side's version drift (:mod:`kitlib.keras` calls these, never the moving names): keras-hub's
renamed XLM-R classes, a failed ``fit`` under JAX, keras-hub's transformers converters. Its own module so the
torch kernels, which vendor :mod:`kitlib.compat`, do not carry it; the versions it is tested on are
:data:`kitlib.compat.TESTED`'s, and each workaround says when it can be deleted.
"""
from __future__ import annotations

import os

# Private Keras names the wrappers below touch: attributes of a model under the JAX backend
# (keras/src/backend/jax/trainer.py) and of its variables (keras/src/backend/common/variables.py).
# tests/test_keras_backends.py exercises them (a failed fit, then the state restored) on the tested Keras.
KERAS_PRIVATE_API = {"model": ("_jax_state", "_jax_state_synced"), "variable": ("_value",)}


def keras_hub_xlmr() -> "SimpleNamespace":
    """The XLM-R classes under their current names, from keras-hub or (older images) keras-nlp.

    keras-hub 0.18+ names them ``XLMRobertaTextClassifier`` / ``XLMRobertaTextClassifierPreprocessor``;
    keras-nlp 0.x called them ``XLMRobertaClassifier`` / ``XLMRobertaPreprocessor``.

    Delete the keras-nlp fallback (and the old names) when no supported image lacks keras-hub:
    Kaggle's TPU image ships keras-nlp 0.x, which from 0.15 on is a shim over keras-hub.

    Returns:
        A namespace with ``Backbone``, ``Tokenizer``, ``Classifier``, ``Preprocessor`` and ``module``.
    """
    from types import SimpleNamespace

    try:
        import keras_hub as m
    except ImportError:  # pragma: no cover - images with keras-nlp only
        import keras_nlp as m
    models = m.models
    return SimpleNamespace(
        module=m,
        Backbone=models.XLMRobertaBackbone,
        Tokenizer=models.XLMRobertaTokenizer,
        Classifier=getattr(models, "XLMRobertaTextClassifier", None) or models.XLMRobertaClassifier,
        Preprocessor=getattr(models, "XLMRobertaTextClassifierPreprocessor", None) or models.XLMRobertaPreprocessor,
    )


def keras_sync_jax_state(model) -> bool:
    """After a failed ``fit``/``predict`` under JAX, copy the trainer's state back into the variables.

    Keras's JAX trainer keeps the variables in a detached state while ``fit``/``predict`` run
    and writes them back at the end; an exception in between (e.g. ``IndivisibleError`` from an
    uneven batch) leaves the model's weights detached until ``model.jax_state_sync()`` runs.

    Delete the ``getattr`` fallback when every supported Keras has ``jax_state_sync`` (3.15 has).

    Returns:
        True when the state was synced, False when this Keras has no ``jax_state_sync``.
    """
    fn = getattr(model, "jax_state_sync", None)
    if fn is None:
        return False
    fn()
    return True


def _jax_model_variables(model) -> list:
    """Every variable Keras's JAX trainer detaches during fit/predict (trainable, non-trainable, optimizer, metrics)."""
    seen, out = set(), []
    opt = getattr(model, "optimizer", None)
    for v in [*model.trainable_variables, *model.non_trainable_variables,
              *(opt.variables if opt is not None else []), *getattr(model, "metrics_variables", [])]:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def keras_guarded(model, method: str, *args, checkpoint: str | os.PathLike | None = None, **kwargs):
    """``getattr(model, method)(*args, **kwargs)``; under JAX, reattach the model's state if it raises.

    Keras's JAX trainer detaches ("purges") the model's variables when ``fit``/``evaluate``/
    ``predict`` start and writes the state back at the end (``jax_state_sync``). An exception in
    between (``IndivisibleError`` from an uneven batch, a bad input, an interrupt) leaves the
    variables empty: the next call fails with ``'NoneType' object is not callable``. Here, after a
    failure: the state of the last completed step is written back with ``model.jax_state_sync()``;
    a failure before the first step (no such state) gets the values the variables held before
    the call (JAX arrays are immutable and are donated only when a step runs). Relies on the
    trainer's private ``_jax_state``/``_jax_state_synced`` and the variables' ``_value``
    (Keras 3.x JAX trainer: :data:`KERAS_PRIVATE_API`), touched only here. Delete this when
    Keras's JAX trainer restores its variables itself after a failed call (not so in 3.15).

    Args:
        model: a Keras model.
        method: ``"fit"``, ``"predict"`` or ``"evaluate"``.
        checkpoint: the last saved ``.keras`` file, named in the error if the state is lost.

    Raises:
        Whatever the call raises, unchanged, with a note that the state was restored; or
        RuntimeError chained to it when some state could not be restored (its buffers were
        donated to a step that failed), saying to reload ``checkpoint`` with ``keras.saving.load_model``.
    """
    import keras

    if keras.backend.backend() != "jax":
        return getattr(model, method)(*args, **kwargs)
    variables = _jax_model_variables(model)
    before = {id(v): getattr(v, "_value", None) for v in variables}
    if hasattr(model, "_jax_state"):
        model._jax_state = None  # so a stale state from an earlier failed call is never written back
    try:
        return getattr(model, method)(*args, **kwargs)
    except Exception as e:
        lost = []
        try:
            if getattr(model, "_jax_state", None) is not None:
                keras_sync_jax_state(model)
            for v in _jax_model_variables(model):
                if getattr(v, "_value", 1) is None:
                    old = before.get(id(v))
                    if old is None or (hasattr(old, "is_deleted") and old.is_deleted()):
                        lost.append(v.path)
                    else:
                        v._value = old
            model._jax_state, model._jax_state_synced = None, True
        except Exception as sync_error:  # noqa: BLE001 - reported below with the original error
            lost.append(f"({type(sync_error).__name__}: {sync_error})")
        if lost:
            where = f" from {checkpoint}" if checkpoint else ""
            raise RuntimeError(
                f"model.{method} failed ({type(e).__name__}: {e}) and the model's JAX state could not be "
                f"restored ({len(lost)} variable(s), e.g. {lost[0]}): reload the last checkpoint{where} with "
                "keras.saving.load_model"
            ) from e
        if hasattr(e, "add_note"):
            e.add_note(f"kitlib: the model's state was restored (jax_state_sync) after the failed {method}")
        raise


def keras_hub_backbone_from_hf(folder) -> "keras.Model":  # noqa: F821
    """keras-hub's backbone for a local transformers folder (``config.json`` ``model_type`` + ``model.safetensors``).

    keras-hub 0.30+ reads a local folder with a transformers ``config.json`` through its
    transformers converters (``keras_hub.src.utils.transformers``; older releases wanted an
    ``hf://`` handle). Its BERT converter also ports ``pooler.dense``, which some BERT folders
    lack (multilingual-e5-small has no pooler): for those, the backbone is built without weights
    and the converter runs on a loader that leaves the absent pooler as initialised. That path
    uses keras-hub's private ``get_preset_loader`` and ``SafetensorLoader``; delete it when
    keras-hub's BERT converter skips a missing pooler itself (0.32 does not).

    Raises:
        ValueError: keras-hub has no converter for the folder's ``model_type`` (its message).
        FileNotFoundError: no ``model.safetensors`` in the folder (keras-hub reads safetensors only).
    """
    from pathlib import Path

    import keras_hub

    folder = Path(folder)
    weights = folder / "model.safetensors"
    if not weights.is_file() and not (folder / "model.safetensors.index.json").is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors; keras-hub reads transformers weights from "
                                "safetensors only (save the model with save_pretrained(safe_serialization=True))")
    from safetensors import safe_open

    names = set()
    if weights.is_file():
        with safe_open(str(weights), framework="np") as f:
            names = set(f.keys())
    if not names or any(n.endswith("pooler.dense.weight") for n in names):
        return keras_hub.models.Backbone.from_preset(str(folder))
    from keras_hub.src.utils.preset_utils import get_preset_loader
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    loader = get_preset_loader(str(folder))
    backbone = keras_hub.models.Backbone.from_preset(str(folder), load_weights=False)

    class _PoolerOptional(SafetensorLoader):
        def port_weight(self, keras_variable, hf_weight_key, hook_fn=None):
            if hf_weight_key.startswith("pooler."):
                return None  # absent: the pooler keeps its initial values (the kit's heads do not use it)
            return super().port_weight(keras_variable, hf_weight_key, hook_fn)

    with _PoolerOptional(str(folder)) as st:
        loader.converter.convert_weights(backbone, st, loader.config)
    return backbone


# transformers config.json key -> the keras-hub backbone argument it sets, where keras-hub's converter leaves it at
# the backbone's default (keras-hub 0.32's convert_llama3.convert_backbone_config reads no rms_norm_eps: a Llama
# folder with 1e-5, SmolLM2's, is built at 1e-6, and its last hidden states move by 0.02 of 38)
HF_DROPPED = {"llama": {"rms_norm_eps": "layer_norm_epsilon"}}


def keras_hub_hf_overrides(folder) -> dict:
    """The backbone arguments keras-hub's transformers converter drops for a local folder (:data:`HF_DROPPED`),
    to pass to ``Backbone.from_preset(folder, **overrides)``; {} for a folder that is not a transformers one, or
    when this keras-hub's converter already sets them.

    Reads keras-hub's private ``get_preset_loader`` (its converter's ``convert_backbone_config``). Delete this
    when keras-hub's converters read ``rms_norm_eps`` themselves (0.32 does not).
    """
    import json
    from pathlib import Path

    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    hf = json.loads(path.read_text())
    dropped = HF_DROPPED.get(hf.get("model_type"), {})
    if not dropped:
        return {}
    from keras_hub.src.utils.preset_utils import get_preset_loader

    converted = get_preset_loader(str(folder)).converter.convert_backbone_config(hf)
    return {arg: hf[key] for key, arg in dropped.items() if key in hf and arg not in converted}
