"""Fine-tuning a pretrained Hugging Face encoder folder with Keras: keras-hub reads the weights.

A local folder with a transformers ``config.json`` (``model_type``, e.g. ``"bert"``) and
``model.safetensors``, such as the converted multilingual-e5-small or all-MiniLM-L6-v2, is read by
keras-hub (0.30 and later) through its transformers converters (``keras_hub.src.utils.transformers``):
``keras_hub.models.Backbone.from_preset(folder)`` builds the matching backbone (``BertBackbone``)
and ports the safetensors weights into it. What keras-hub does not do here, the kit does:

* the tokenizer is the folder's own Hugging Face tokenizer (``transformers.AutoTokenizer``), so the
  token ids are exactly the torch side's (keras-hub's BERT converter wants a ``vocab.txt`` or a
  ``sentencepiece.bpe.model`` these folders may lack). :class:`HFPreprocessor` wraps it in the
  interface :mod:`kitlib.keras.data` expects: ``{"token_ids", "padding_mask"}`` int32 ``[B, L]``;
* a folder without the BERT pooler (E5 has none, and the head here does not use it) gets a
  pooler left as initialised (:func:`_load_backbone`);
* the classifier head is new, pooled as the torch side pools the same folder
  (:func:`build_pretrained_classifier`): the sequence output's mean over the real tokens where
  ``config.json`` says ``kitlib_pooling: "mean"`` (E5), else BERT's pooler over the first token;
  then dropout, one float32 logit and a float32 sigmoid.

The fine-tune recipe is the torch side's, the row of :data:`kitlib.training.recipe.RECIPES` the folder calls
for (:func:`recipe_for_preset`), in Keras's terms (:func:`compile_pretrained`): word embeddings
frozen (``trainable=False``), AdamW on the recipe's schedule (:class:`RecipeSchedule`, from
:func:`kitlib.training.recipe.lr_factor`), the head at its own rate (:class:`HeadLRAdamW`), and positive
rows weighted by ``pos_weight`` (a per-row ``sample_weight``, :func:`kitlib.keras.data.row_weights`,
Keras's form of ``BCEWithLogitsLoss(pos_weight=...)``).

Import this module after :func:`kitlib.keras.runtime.keras_runtime` (it imports Keras).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np

HF_CONFIG = "config.json"
HEAD_PREFIX = "head"  # the head's layers are named head_*; HeadLRAdamW gives them the recipe's head_lr


def is_hf_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a transformers ``config.json`` with a ``model_type``."""
    cfg = Path(path) / HF_CONFIG
    if not cfg.is_file():
        return False
    try:
        return "model_type" in json.loads(cfg.read_text())
    except (OSError, ValueError):
        return False


class HFPreprocessor:
    """A Hugging Face tokenizer as the kit's Keras pipelines call a preprocessor.

    ``preprocessor(texts)`` gives ``{"token_ids", "padding_mask"}``: int32 numpy ``[len(texts),
    sequence_length]``, truncated and right-padded to ``sequence_length`` with the tokenizer's pad
    id, special tokens included (the ids ``tokenizer(text_prefix + text, truncation=True,
    max_length=L, padding="max_length")`` gives: the torch side's).

    Attributes:
        tokenizer: the ``transformers`` tokenizer.
        sequence_length: ``L``, tokens per row.
        text_prefix: put before every text (E5 was trained with ``"query: "``).
    """

    def __init__(self, tokenizer, sequence_length: int, text_prefix: str = ""):
        if sequence_length < 2:
            raise ValueError(f"sequence_length must be >= 2 (room for the special tokens), not {sequence_length}")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.text_prefix = text_prefix

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, sequence_length: int, text_prefix: str | None = None) -> "HFPreprocessor":
        """Load the tokenizer of a transformers folder (``tokenizer.json`` and its config).

        ``text_prefix=None`` takes the folder's own (:func:`kitlib.checkpoint.text_prefix`: E5's ``"query: "``).

        Raises:
            OSError: the folder has no tokenizer transformers can read (transformers' message).
        """
        from transformers import AutoTokenizer

        if text_prefix is None:
            from ..checkpoint import text_prefix as folder_prefix

            text_prefix = folder_prefix(folder)
        return cls(AutoTokenizer.from_pretrained(str(folder)), sequence_length, text_prefix)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "HFPreprocessor":
        """Read what :meth:`save` wrote."""
        meta = json.loads((Path(folder) / "preprocessor.json").read_text())
        return cls.from_folder(folder, meta["sequence_length"], meta["text_prefix"])

    def __call__(self, texts) -> dict[str, np.ndarray]:
        texts = [self.text_prefix + str(t) for t in (texts.tolist() if hasattr(texts, "tolist") else texts)]
        enc = self.tokenizer(texts, truncation=True, max_length=self.sequence_length, padding="max_length",
                             return_attention_mask=True)
        return {"token_ids": np.asarray(enc["input_ids"], dtype=np.int32),
                "padding_mask": np.asarray(enc["attention_mask"], dtype=np.int32)}

    def save(self, folder: str | os.PathLike) -> None:
        """Write the tokenizer files and ``preprocessor.json`` (kind, sequence length, prefix) into ``folder``."""
        folder = Path(folder)
        self.tokenizer.save_pretrained(str(folder))
        (folder / "preprocessor.json").write_text(json.dumps(
            {"kind": "hf", "sequence_length": self.sequence_length, "text_prefix": self.text_prefix}))


def _load_backbone(folder: Path):
    """keras-hub's backbone for the folder's ``model_type``, weights ported from ``model.safetensors``.

    Through :func:`kitlib.compat.keras.keras_hub_backbone_from_hf` (a folder without BERT's pooler, as
    multilingual-e5-small, keeps the backbone's initial pooler; the mean-pooled head never reads it).
    """
    from ..compat.keras import keras_hub_backbone_from_hf

    return keras_hub_backbone_from_hf(folder)


def folder_config(folder: str | os.PathLike) -> dict:
    """The folder's transformers ``config.json`` as a dict."""
    return json.loads((Path(folder) / HF_CONFIG).read_text())


def build_pretrained_classifier(folder: str | os.PathLike, *, freeze_word_embeddings: bool = False,
                                dropout: float = 0.1, seed: int = 0):
    """A classifier on the pretrained backbone of ``folder`` (build it inside the runtime's scope).

    Args:
        folder: a transformers folder (:func:`is_hf_folder`).
        freeze_word_embeddings: ``trainable=False`` on the backbone's ``token_embedding``
            (the recipe's ``freeze_word_embeddings``; E5: 96 M of its 117.5 M parameters). A
            mean-pooled head also leaves the backbone's unused pooler (``pooled_dense``) frozen.
        dropout: before the head.
        seed: the head's initializer seed.

    Returns:
        A functional ``keras.Model`` taking ``{"token_ids", "padding_mask"}`` int32 ``[B, L]`` and
        giving float32 ``[B, 1]`` probabilities: ``sigmoid(head_logit(pooled))``, where ``pooled``
        is the mean of the sequence output over the real tokens (``padding_mask``) when the
        folder's ``config.json`` says ``kitlib_pooling: "mean"`` (:data:`kitlib.checkpoint.POOLING_KEY`),
        else the backbone's ``pooled_output`` (BERT's pooler on the first token, as
        ``BertForSequenceClassification`` reads it). The head's layers are named ``head_*``.

    Raises:
        FileNotFoundError, ValueError: see :func:`kitlib.compat.keras.keras_hub_backbone_from_hf`.
    """
    from ..checkpoint import POOLING_KEY

    mean_pool = folder_config(folder).get(POOLING_KEY) == "mean"
    backbone = _load_backbone(Path(folder))
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    feed = dict(inputs)
    if "segment_ids" in backbone.input:  # BERT's token types: one segment
        feed["segment_ids"] = keras.ops.zeros_like(token_ids)
    out = backbone(feed)
    if mean_pool:
        pooled = keras.layers.GlobalAveragePooling1D(name=f"{HEAD_PREFIX}_mean_pool")(out["sequence_output"], mask=padding_mask)
    else:
        pooled = out["pooled_output"]
    pooled = keras.layers.Dropout(dropout, name=f"{HEAD_PREFIX}_dropout")(pooled)
    logit = keras.layers.Dense(1, dtype="float32", name=f"{HEAD_PREFIX}_logit",
                               kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=seed))(pooled)
    probs = keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)
    if freeze_word_embeddings:
        backbone.get_layer("token_embedding").trainable = False
    if mean_pool and any(layer.name == "pooled_dense" for layer in backbone.layers):
        # keras-hub's BertBackbone always builds BERT's pooler; the mean-pooled head never reads it.
        # Left trainable, its weights get no gradient (Keras warns "Gradients do not exist for
        # variables ['pooled_dense/kernel', ...]" at every fit) and are counted as trainable, which
        # the torch side's model (no pooler) does not have.
        backbone.get_layer("pooled_dense").trainable = False
    return keras.Model(inputs, probs, name="pretrained_classifier")


@keras.saving.register_keras_serializable(package="kitlib")
class RecipeSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``peak * factors[step]``: the recipe's rate at every optimizer step, from :func:`kitlib.training.recipe.lr_factor`.

    The factors are computed once by the torch side's function (one home for the warm-up and
    decay rule) and looked up here, for steps ``0 .. total_steps`` (the last entry, the rate
    after the run's last step, holds for any later step).
    """

    def __init__(self, peak: float, factors):
        factors = [float(f) for f in factors]
        if not factors:
            raise ValueError("RecipeSchedule needs at least one step")
        self.peak, self.factors = float(peak), factors

    @classmethod
    def for_recipe(cls, recipe, peak: float, total_steps: int) -> "RecipeSchedule":
        """The schedule of ``recipe`` (a :class:`kitlib.training.recipe.Recipe`) over ``total_steps`` optimizer steps."""
        from ..training.recipe import lr_factor

        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, not {total_steps}")
        return cls(peak, [lr_factor(s, recipe, total_steps) for s in range(total_steps + 1)])

    def __call__(self, step):
        table = keras.ops.convert_to_tensor(np.asarray(self.factors, dtype=np.float32))
        i = keras.ops.minimum(keras.ops.cast(step, "int32"), len(self.factors) - 1)
        return self.peak * keras.ops.take(table, i)

    def get_config(self):
        return {"peak": self.peak, "factors": self.factors}


@keras.saving.register_keras_serializable(package="kitlib")
class HeadLRAdamW(keras.optimizers.AdamW):
    """AdamW whose head variables (layers named ``head_*``) step ``head_multiplier`` times larger.

    Keras has no parameter groups; :meth:`update_step` is where Keras 3 hands each variable its
    learning rate, on TF and JAX alike, so the head's is scaled there: the torch recipe's
    separate head learning rate (:func:`kitlib.training.recipe.make_optimizer`).
    """

    def __init__(self, *args, head_multiplier: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.head_multiplier = float(head_multiplier)
        self._is_head: list[bool] = []

    def build(self, variables):
        # Which variables are the head's, by their Keras path, in the optimizer's own order: under
        # TF, update_step is handed the underlying tf.Variable (no path), so it looks them up by index.
        super().build(variables)
        self._is_head = [v.path.startswith(HEAD_PREFIX) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        if self.head_multiplier != 1.0 and self._is_head[self._get_variable_index(variable)]:
            learning_rate = keras.ops.cast(learning_rate, variable.dtype) * self.head_multiplier
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "head_multiplier": self.head_multiplier}


def compile_pretrained(model, recipe, lr: float, total_steps: int, *, weight_decay: float = 0.0,
                       jit_compile="auto", scope=None) -> None:
    """Compile ``model`` for ``recipe`` (a :class:`kitlib.training.recipe.Recipe`): AdamW, binary cross-entropy, ROC AUC as ``auc``.

    Args:
        recipe: the row of :data:`kitlib.training.recipe.RECIPES`.
        lr: the body's peak learning rate (the recipe's, or one given by hand); the head's is
            ``recipe.head_lr`` (or ``lr`` when the recipe has none).
        total_steps: optimizer steps of the whole run (the schedule's length).
        weight_decay: AdamW's decoupled weight decay (the torch side's default, :class:`kitlib.training.job.TrainJob`).
        jit_compile: the runtime's value.
        scope: the runtime's scope factory (None: no scope).

    Raises:
        ValueError: ``lr`` not positive, ``total_steps`` < 1.
    """
    import contextlib

    if lr <= 0:
        raise ValueError(f"lr must be > 0, not {lr}")
    head_lr = recipe.head_lr or lr
    with (scope or contextlib.nullcontext)():
        model.compile(
            optimizer=HeadLRAdamW(RecipeSchedule.for_recipe(recipe, lr, total_steps),
                                  weight_decay=weight_decay, head_multiplier=head_lr / lr),
            loss=keras.losses.BinaryCrossentropy(),
            metrics=[keras.metrics.AUC(name="auc")],
            jit_compile=jit_compile,
        )
