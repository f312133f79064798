"""The model kind: one table (:data:`KINDS`) of small objects, asked, never branched on.

A kind says how a checkpoint folder becomes probabilities of the positive class:

=================  ==========================================  ===========================  ===================
kind               loaded as                                   score of a row               head kept float32
=================  ==========================================  ===========================  ===================
``encoder``        :func:`kitlib.models.model.load_model` (XLM-R,     the head's logit (1 logit),  ``classifier``
                   BERT, e5: ``AutoModelForSequenceClass.``)   or the logit difference (2)
``decoder``        ``AutoModelForSequenceClassification``      the ``score`` Linear on the  ``score``
                   (Llama, Qwen2/3, Gemma2/3, Mistral)         last real token (transformers)
``answer-tokens``  ``AutoModelForCausalLM`` + a :class:`Prompt`  logsumexp of the "Yes"       lm_head rows upcast
                                                               variants' logits minus the   (computed in float32
                                                               "No" variants' at the last   here)
                                                               real position
=================  ==========================================  ===========================  ===================

Every kind reduces a row to one float32 *positive logit* ``z`` (:meth:`Kind.positive_logit`):
the probability is ``sigmoid(z)`` and the training loss is binary cross-entropy with logits on
float labels (soft labels allowed). For answer tokens ``z = logsumexp(yes) - logsumexp(no)``, so
``sigmoid(z) = sum softmax over yes / (yes + no)``: the 2-way softmax over the two sets, and the
loss is cross-entropy on that 2-way choice.

How a replica loop asks it (the parent resolves and binds once; the bound kind is a frozen,
picklable dataclass handed to every replica)::

    kind = kind_for(checkpoint, kind="auto")      # detect from config.json, or the override
    tok = kind.load_tokenizer(checkpoint)         # pad token set, padding side right
    kind = kind.bind(tok)                         # checks the tokenizer; answer-token ids resolved
    batch = kind.encode(tok, texts, max_length)   # input_ids, attention_mask [N, L] int64, right-padded
    print(kind.seen(tok, texts[0], max_length))   # what the model sees for one row
    # in each replica:
    model = kind.load(checkpoint, dtype=..., xla=replica.xla); kind.keep_head_float32(model)
    p = kind.probabilities(model, ids, mask)      # float32 [batch]
    loss = kind.loss(model, ids, mask, labels)    # float32 scalar

Decoders are loaded with ``use_cache=False`` (no KV cache; Gemma2's fails on XLA) and, on XLA, with
:data:`XLA_ATTENTION`'s implementation.
"""
from __future__ import annotations

import dataclasses
import os
import re
import string
from dataclasses import dataclass, field
from typing import ClassVar

from .config import hf_config

KIND_KEY = "kitlib_kind"  # config.json: the kind a kit-trained checkpoint was trained as (wins over detection)
PROMPT_KEY = "kitlib_prompt"  # config.json: the answer-token template a kit-trained checkpoint was trained with
ENCODER_TYPES = ("bert", "xlm-roberta", "roberta", "distilbert", "deberta-v2", "electra", "modernbert")
DECODER_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text")
# model_type -> attention implementation on XLA (transformers refuses SDPA for Gemma2/3); the rest take
# kitlib.compat.xla_attention_implementation()
XLA_ATTENTION = {"gemma2": "eager", "gemma3": "eager", "gemma3_text": "eager"}

DEFAULT_RULE = "No toxic, insulting, obscene, threatening or hateful language."
DEFAULT_TEMPLATE = ("You are a forum moderator. Rule: {rule}\n"
                    "Comment: {text}\n"
                    "Does the comment break the rule? Answer Yes or No.\n"
                    "Answer:")


@dataclass(frozen=True)
class Prompt:
    """The answer-token form's prompt: a ``str.format`` template with ``{text}`` and other fields.

    Attributes:
        template: must contain ``{text}`` once; other ``{names}`` come from each row's column, else :attr:`fields`
            (:meth:`columns`: the rule); the row's text and fields are data (:func:`_template_ids`).
        fields: defaults for the other names (Jigsaw Agile Community Rules has a ``rule`` column;
            the kit's toxicity sample has none, so :data:`DEFAULT_RULE` stands in).
        yes, no: answer variants; each that the tokenizer makes a single token joins its set.
    """

    template: str = DEFAULT_TEMPLATE
    fields: tuple = (("rule", DEFAULT_RULE),)
    yes: tuple = ("Yes", " Yes", "yes", " yes", "YES", " YES")
    no: tuple = ("No", " No", "no", " no", "NO", " NO")

    @property
    def names(self) -> tuple:
        """The template's ``{names}`` other than ``{text}``, in order."""
        return tuple(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(self.template) if f and f != "text"))

    def columns(self, path) -> tuple:
        """The :attr:`names` that CSV ``path`` has as columns: each row's own value is used (the one rule of a
        template's fields; a name the file lacks takes its :attr:`fields` default).

        Raises:
            ValueError: a name neither a column of ``path`` nor in :attr:`fields` (file, name and fix named).
        """
        from ..data import csv_columns

        found = csv_columns(path)
        for name in self.names:
            if name not in found and name not in dict(self.fields):
                raise ValueError(f"{path}: the prompt template names {{{name}}}, but the file has no column {name!r} "
                                 f"(found {', '.join(found)}) and Prompt.fields gives no default; add the column "
                                 "or take the name out of the prompt")
        return tuple(n for n in self.names if n in found)

    def values(self, **row) -> dict:
        """The :attr:`names`' values: :attr:`fields`' defaults, then ``row``'s (its ``text`` left out).

        Raises:
            ValueError: the template lacks ``{text}`` (or has it twice), or names a field given nowhere.
        """
        if self.template.count("{text}") != 1:
            raise ValueError(f"prompt template must contain {{text}} exactly once: {self.template!r}")
        values = {**dict(self.fields), **{k: v for k, v in row.items() if k != "text"}}
        missing = [n for n in self.names if n not in values]
        if missing:
            raise ValueError(f"prompt template names {{{missing[0]}}}, which neither the row nor Prompt.fields "
                             f"gives (fields: {sorted(values)}); add it to Prompt(fields=...) or the data")
        return values

    def parts(self, **row) -> tuple[str, str]:
        """``(head, tail)``: the template around ``{text}``, its fields filled (:meth:`values`; its errors)."""
        values = self.values(**row)
        head, tail = self.template.split("{text}")
        return head.format(**values), tail.format(**values)

    def render(self, text: str, **row) -> str:
        """The whole prompt for one row (``str``)."""
        head, tail = self.parts(**row)
        return head + text + tail


def _positive(logits, column: int):
    """float32 ``[batch]`` positive logit from head logits ``[batch, 1 or 2]`` (column = the target's).

    Raises:
        ValueError: any other number of logits per row.
    """
    logits = logits.float()
    if logits.shape[-1] == 1:
        return logits[:, 0]
    if logits.shape[-1] == 2:
        return logits[:, column] - logits[:, 1 - column]
    raise ValueError(f"expected 1 or 2 logits per row, got {logits.shape[-1]}")


@dataclass(frozen=True)
class Kind:
    """What every kind answers (see the module docstring). Subclasses set :attr:`name` and :attr:`head`.

    Attributes:
        prefix: text put before every row (``config.json``'s ``kitlib_text_prefix``, e5's ``"query: "``).
        label: the predicted label (the head's ``id2label`` names it; :func:`kitlib.models.model.prediction_column`).
        column: the head's logit column of ``label`` (set by :meth:`bind_model`; 0 for one logit).
    """

    name: ClassVar[str] = ""
    head: ClassVar[tuple] = ()  # module names kept float32
    plans_memory: ClassVar[bool] = True  # a memory plan is printed (and checked) before its replicas start
    prefix: str = ""
    label: str = "toxic"
    column: int = 0

    def load_tokenizer(self, path):
        """``AutoTokenizer`` of ``path`` with padding on the right (and, for decoders, a pad token)."""
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        tok.padding_side = "right"
        return tok

    def bind(self, tokenizer) -> "Kind":
        """This kind, checked against ``tokenizer`` (answer tokens: their ids resolved). Raises ValueError."""
        if tokenizer.pad_token_id is None or tokenizer.padding_side != "right":
            raise ValueError(f"{self.name}: the tokenizer needs a pad token and padding_side='right' (it has "
                             f"pad {tokenizer.pad_token!r}, side {tokenizer.padding_side!r}); use kind.load_tokenizer(path)")
        return self

    def render(self, text: str, **row) -> str:
        """The text a row becomes before tokenization."""
        return self.prefix + text

    def row_columns(self, path) -> tuple:
        """The columns of CSV ``path`` that :meth:`render` reads from each row besides its text (the answer-token
        prompt's: :meth:`Prompt.columns`, which raises ValueError for a name given nowhere)."""
        return ()

    def encode(self, tokenizer, texts, max_length: int, rows=None) -> dict:
        """Tokenize ``texts`` (``rows``: per-row fields, or None) into right-padded tensors.

        A row is data: a special token's string in it is text (``split_special_tokens``), and a row that
        gives no token (empty or blank, no bos) is read as :func:`_stand_in`'s tokens.

        Returns:
            ``{"input_ids", "attention_mask"}``: int64 ``[N, L]``, L the longest row (<= ``max_length``).
        """
        rendered = [self.render(t, **(r or {})) for t, r in zip(texts, rows or [None] * len(texts))]
        return _padded(tokenizer, tokenizer(rendered, truncation=True, max_length=max_length,
                                            split_special_tokens=True)["input_ids"], max_length)

    def seen(self, tokenizer, text: str, max_length: int, **row) -> str:
        """What the model sees for one row: its tokens decoded back (special tokens shown), with a header."""
        ids = self.encode(tokenizer, [text], max_length, [row])["input_ids"][0].tolist()
        return f"what the {self.name} model sees ({len(ids)} tokens):\n{tokenizer.decode(ids)}"

    def check_tokens(self, input_ids, attention_mask) -> None:
        """Refuse rows the kind would read wrong (decoders: see :meth:`Decoder.check_tokens`)."""

    def load(self, path, *, dtype=None, xla: bool = False, head_for_training: bool = False, quantization=None,
             device=None):
        """The model in eval mode on CPU; ``dtype`` its weights' (None: as saved); ``quantization`` a
        ``BitsAndBytesConfig`` that loads them in 8 or 4 bits onto ``device`` (decoders only)."""
        raise NotImplementedError

    def skeleton(self, path):
        """The module :meth:`load` gives for training (``head_for_training=True``), on torch's ``meta`` device:
        its structure and parameter shapes, no weight read or allocated (to count what trains)."""
        raise NotImplementedError

    def config_keys(self) -> dict:
        """What a checkpoint trained as this kind records in its ``config.json`` (:data:`KIND_KEY`; the
        answer-token form also :data:`PROMPT_KEY`), so that :func:`kind_for` finds the same kind again."""
        return {KIND_KEY: self.name}

    def bind_model(self, model) -> "Kind":
        """This kind with :attr:`column` read from ``model``'s head (:func:`kitlib.models.model.prediction_column`)."""
        from .model import prediction_column

        return dataclasses.replace(self, column=prediction_column(model.config, self.label)[0])

    def keep_head_float32(self, model) -> None:
        """Keep :attr:`head`'s modules in float32 outside autocast (:func:`kitlib.models.model.keep_head_float32`)."""
        from .model import keep_head_float32

        for name in self.head:
            keep_head_float32(model, name)

    def positive_logit(self, model, input_ids, attention_mask):
        """float32 ``[batch]``: the logit of the positive class for each row."""
        out = model(input_ids=input_ids, attention_mask=attention_mask)
        return _positive(out.logits, self.column)

    def probabilities(self, model, input_ids, attention_mask):
        """float32 ``[batch]`` in [0, 1]: ``sigmoid`` of :meth:`positive_logit`."""
        import torch

        return torch.sigmoid(self.positive_logit(model, input_ids, attention_mask))

    def loss(self, model, input_ids, attention_mask, labels, pos_weight=None):
        """float32 scalar: binary cross-entropy with logits, mean over rows; ``labels`` float ``[batch]`` in [0, 1];
        ``pos_weight``: None or a float32 scalar tensor weighting the positive term (:func:`kitlib.training.recipe.positive_weight`)."""
        import torch.nn.functional as F

        z = self.positive_logit(model, input_ids, attention_mask)
        return F.binary_cross_entropy_with_logits(z, labels.to(z.device, z.dtype), pos_weight=pos_weight)

    def packed(self, tokenizer, texts, max_length: int, rows=None):
        """``texts`` (and ``rows``) as :meth:`encode` makes them, checked (:meth:`check_tokens`) and packed for
        :class:`kitlib.data.Tokens`: ``(lengths, ids)``, int64 ``[N]`` real tokens per row and int32
        ``[sum(lengths)]`` the rows' ids one after another (the padding dropped)."""
        import numpy as np

        batch = self.encode(tokenizer, list(texts), max_length, rows)
        self.check_tokens(batch["input_ids"], batch["attention_mask"])
        mask = batch["attention_mask"].numpy().astype(bool)
        return mask.sum(axis=1).astype(np.int64), batch["input_ids"].numpy()[mask].astype(np.int32)


def _stand_in(tokenizer) -> list:
    """The ids of a row that gives no token: a space's, else the first of bos, eos, unk that is not the pad.

    Raises:
        ValueError: the tokenizer has none of them (name the fix).
    """
    ids = tokenizer(" ", add_special_tokens=False)["input_ids"] or [
        i for i in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
        if i is not None and i != tokenizer.pad_token_id][:1]
    if not ids:
        raise ValueError("an empty row gives no token, and the tokenizer has no space, bos, eos or unk token but the "
                         "pad to read it as; give the tokenizer a bos token")
    return ids


def _padded(tokenizer, seqs, max_length: int) -> dict:
    """Rows of ids (an empty one as :func:`_stand_in`'s) right-padded into int64 ``input_ids``/``attention_mask``."""
    import torch

    seqs = [s or _stand_in(tokenizer)[:max_length] for s in seqs]
    width = max(map(len, seqs), default=0)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s, dtype=torch.long), 1
    return {"input_ids": ids, "attention_mask": mask}


def _pieces(tokenizer, part: str) -> list:
    """A template ``part`` split at the tokenizer's special tokens' strings: text, special, text, ..."""
    specials = sorted({*tokenizer.all_special_tokens, *(t.content for t in tokenizer.added_tokens_decoder.values()
                                                         if t.special)}, key=len, reverse=True)
    return re.split("(" + "|".join(map(re.escape, specials)) + ")", part) if specials else [part]


def _template_ids(tokenizer, pieces: list, values: dict, first: bool) -> list:
    """The ids of a template part's :func:`_pieces`: its special tokens (the template's, not the data's) as their
    ids, the text between, its fields filled from ``values``, tokenized as data (``split_special_tokens``);
    ``first``: the tokenizer's own special tokens (bos) added as ``tokenizer(part)`` adds them."""
    ids = []
    for i, piece in enumerate(pieces):
        if i % 2:
            ids.append(tokenizer.convert_tokens_to_ids(piece))
        elif piece or (first and i == 0):
            ids += tokenizer(piece.format(**values), add_special_tokens=first and i == 0,
                             split_special_tokens=True)["input_ids"]
    return ids


@dataclass(frozen=True)
class Encoder(Kind):
    """XLM-R / BERT / e5 classifiers, loaded by :func:`kitlib.models.model.load_model` (mean pooling, the kit's head)."""

    name: ClassVar[str] = "encoder"
    head: ClassVar[tuple] = ("classifier",)
    plans_memory: ClassVar[bool] = False  # small encoders: the kit's own runs never needed one

    def load(self, path, *, dtype=None, xla: bool = False, head_for_training: bool = False, quantization=None,
             device=None):
        """The classifier in eval mode on CPU; ``dtype`` (e.g. ``torch.bfloat16``) casts its weights.

        Raises:
            ValueError: ``quantization``: encoders do not plan memory, so 8/4-bit weights are never theirs.
        """
        from .model import load_model

        if quantization is not None:
            raise ValueError(f"{path}: 8/4-bit weights are for decoders (weights=...), not an encoder")

        model = load_model(path, xla=xla, head_for_training=head_for_training, label=self.label)
        return model if dtype is None else model.to(dtype)

    def skeleton(self, path):
        from .model import skeleton

        return skeleton(path, head_for_training=True)


def _decoder_kwargs(config, *, dtype, xla: bool, quantization=None, device=None) -> dict:
    """``from_pretrained`` keyword arguments every decoder kind shares (no KV cache; XLA's attention); with
    ``quantization`` (a ``BitsAndBytesConfig``: :func:`kitlib.models.weights.quantization_config`), the
    weights quantized by bitsandbytes as they load, onto ``device`` (a quantized model cannot be moved after)."""
    from .. import compat

    compat.keep_hub_kernels_off()  # before from_pretrained: its eval() would kernelize for the device
    kwargs = {"use_cache": False}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if xla:
        kwargs["attn_implementation"] = XLA_ATTENTION.get(config.model_type) or compat.xla_attention_implementation()
    if quantization is not None:
        kwargs.update(quantization_config=quantization, device_map={"": str(device or "cpu")})
    return kwargs


def _with_pad(tok):
    """``tok`` with a pad token: its own, else eos, else unk (left None when it has none of them)."""
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


@dataclass(frozen=True)
class Decoder(Kind):
    """Decoder LLMs through ``AutoModelForSequenceClassification``: the ``score`` Linear on the last real token.

    transformers pools on the right-most token that is not ``config.pad_token_id``; with right
    padding that is the last real token as long as no real token equals the pad id
    (:meth:`check_tokens`). A folder that is not yet a sequence classifier (a causal LM) gets a
    new one-logit head named :attr:`label`.
    """

    name: ClassVar[str] = "decoder"
    head: ClassVar[tuple] = ("score",)

    def load_tokenizer(self, path):
        """The tokenizer, padding on the right; without a pad token, the eos token pads (else unk)."""
        return _with_pad(Kind.load_tokenizer(self, path))

    def load(self, path, *, dtype=None, xla: bool = False, head_for_training: bool = False, quantization=None,
             device=None):
        """The classifier in eval mode on CPU (with ``quantization``: 8/4-bit weights on ``device``,
        :func:`_decoder_kwargs`), ``config.pad_token_id`` set to the tokenizer's pad id.

        transformers pools on the last token that is not ``config.pad_token_id``, so it must be the
        id the tokenizer pads with (Gemma2's config says 0 by default whatever the tokenizer pads
        with): the bound kind's :attr:`pad_id`, else the tokenizer's (:meth:`load_tokenizer`).

        Raises:
            ValueError: the tokenizer has neither a pad, eos nor unk token to pad with.
        """
        from transformers import AutoModelForSequenceClassification

        config = hf_config(path)
        kwargs = {**_decoder_kwargs(config, dtype=dtype, xla=xla, quantization=quantization, device=device),
                  **self._new_head(config)}
        pad = self.pad_id if self.pad_id is not None else self.load_tokenizer(path).pad_token_id
        if pad is None:
            raise ValueError(f"{path}: the tokenizer has no pad token and no eos/unk to pad with; give it a pad token")
        kwargs["pad_token_id"] = pad
        return AutoModelForSequenceClassification.from_pretrained(path, **kwargs).eval()

    def _new_head(self, config) -> dict:
        """``from_pretrained`` keywords of a new one-logit head named :attr:`label` for a folder that is not
        yet a sequence classifier (a causal LM); ``{}`` for one that is."""
        archs = getattr(config, "architectures", None) or []
        if any(a.endswith("ForSequenceClassification") for a in archs):
            return {}
        return dict(num_labels=1, problem_type="multi_label_classification", id2label={0: self.label},
                    label2id={self.label: 0})

    def skeleton(self, path):
        import torch
        from transformers import AutoModelForSequenceClassification

        config = hf_config(path, **self._new_head(hf_config(path)))
        with torch.device("meta"):
            return AutoModelForSequenceClassification.from_config(config)

    def check_tokens(self, input_ids, attention_mask) -> None:
        """Refuse left padding and real tokens equal to the pad id (the pooled token would not be the last real one).

        Args:
            input_ids, attention_mask: int ``[N, L]`` (torch or numpy), as :meth:`encode` gives them.

        Raises:
            ValueError: naming the first bad row and the fix.
        """
        import numpy as np

        ids, mask = np.asarray(input_ids), np.asarray(attention_mask).astype(bool)
        left = np.flatnonzero((np.diff(mask.astype(np.int8), axis=1) > 0).any(axis=1))
        if len(left):
            raise ValueError(f"row {left[0]}: padding on the left; decoders read the last real token with the "
                             "padding on the right (tokenizer.padding_side='right', as kind.load_tokenizer sets)")
        if self.pad_id is not None:
            bad = np.flatnonzero(((ids == self.pad_id) & mask).any(axis=1))
            if len(bad):
                raise ValueError(f"row {bad[0]}: a real token equals the pad id {self.pad_id}, so transformers would "
                                 "pool on an earlier token; give the tokenizer a pad token that never occurs in text")

    pad_id: int | None = None  # set by bind

    def bind(self, tokenizer) -> "Kind":
        """Checked as :meth:`Kind.bind`; records the pad id for :meth:`check_tokens`."""
        super().bind(tokenizer)
        return dataclasses.replace(self, pad_id=int(tokenizer.pad_token_id))


@dataclass(frozen=True)
class AnswerTokens(Kind):
    """A causal LM asked a :class:`Prompt`; the answer-token logits at the last real position score the row.

    ``yes_ids``/``no_ids`` are set by :meth:`bind` (each variant the tokenizer makes one token).
    Only those rows of the output embedding are multiplied, in float32 with autocast off, so no
    ``[batch, length, vocab]`` logits tensor is ever made; Gemma's final logit soft-capping is applied.
    """

    name: ClassVar[str] = "answer-tokens"
    head: ClassVar[tuple] = ()  # the lm_head rows are upcast in positive_logit, not patched
    prompt: Prompt = field(default_factory=Prompt)
    yes_ids: tuple = ()
    no_ids: tuple = ()

    def load_tokenizer(self, path):
        """As :meth:`Decoder.load_tokenizer`."""
        return _with_pad(Kind.load_tokenizer(self, path))

    def bind(self, tokenizer) -> "Kind":
        """Resolve :attr:`yes_ids`/:attr:`no_ids` from the prompt's variants (an unknown word's ``unk`` id is no variant).

        Raises:
            ValueError: no variant of a set is a single token, or the sets share a token (naming them).
        """
        super().bind(tokenizer)
        sets = {}
        for what, variants in (("yes", self.prompt.yes), ("no", self.prompt.no)):
            ids = [tokenizer.encode(v, add_special_tokens=False) for v in variants]
            sets[what] = tuple(sorted({i[0] for i in ids if len(i) == 1 and i[0] != tokenizer.unk_token_id}))
            if not sets[what]:
                raise ValueError(f"answer-tokens: none of the {what!r} variants {variants} is a single token of this "
                                 f"tokenizer ({[tokenizer.convert_ids_to_tokens(i) for i in ids]}); pass Prompt({what}=...)")
        if set(sets["yes"]) & set(sets["no"]):
            raise ValueError(f"answer-tokens: the yes and no variants share tokens {set(sets['yes']) & set(sets['no'])}")
        return dataclasses.replace(self, yes_ids=sets["yes"], no_ids=sets["no"])

    def render(self, text: str, **row) -> str:
        return self.prompt.render(self.prefix + text, **row)

    def config_keys(self) -> dict:
        return {KIND_KEY: self.name, PROMPT_KEY: self.prompt.template}

    def row_columns(self, path) -> tuple:
        return self.prompt.columns(path)

    def encode(self, tokenizer, texts, max_length: int, rows=None) -> dict:
        """As :meth:`Kind.encode` (each row's fields filled in, :meth:`Prompt.values`; the fields and the text
        are data, the template's own special tokens are not), but a long text is cut inside the prompt, so
        ``"Answer:"`` always ends the row.

        Raises:
            ValueError: the prompt alone (without the text) takes ``max_length`` tokens or more; a field given nowhere.
        """
        seqs = []
        pieces = [_pieces(tokenizer, p) for p in self.prompt.template.split("{text}")]
        for text, row in zip(texts, rows or [{}] * len(texts)):
            values = self.prompt.values(**(row or {}))  # the template checked: pieces are its head and tail
            head_ids = _template_ids(tokenizer, pieces[0], values, True)
            tail_ids = _template_ids(tokenizer, pieces[-1], values, False)
            room = max_length - len(head_ids) - len(tail_ids)
            if room < 1:
                raise ValueError(f"answer-tokens: the prompt alone is {len(head_ids) + len(tail_ids)} tokens, no room "
                                 f"for the text within max_length={max_length}; raise max_length or shorten the template")
            text_ids = tokenizer(self.prefix + text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            seqs.append(head_ids + text_ids[:room] + tail_ids)
        return _padded(tokenizer, seqs, max_length)

    def load(self, path, *, dtype=None, xla: bool = False, head_for_training: bool = False, quantization=None,
             device=None):
        """``AutoModelForCausalLM`` in eval mode on CPU, or with ``quantization`` 8/4-bit weights on ``device``
        (:func:`_decoder_kwargs`; ``head_for_training`` is unused: the LM head is the head)."""
        from transformers import AutoModelForCausalLM

        config = hf_config(path)
        kwargs = _decoder_kwargs(config, dtype=dtype, xla=xla, quantization=quantization, device=device)
        return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()

    def bind_model(self, model) -> "Kind":
        return self

    def skeleton(self, path):
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(hf_config(path))

    def positive_logit(self, model, input_ids, attention_mask):
        """``logsumexp(yes logits) - logsumexp(no logits)`` at each row's last real position: float32 ``[batch]``.

        Raises:
            ValueError: the kind is not bound (:meth:`bind`).
        """
        import torch

        if not self.yes_ids:
            raise ValueError("answer-tokens: kind.bind(tokenizer) first (the yes/no token ids are not resolved)")
        hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        last = attention_mask.sum(dim=1) - 1
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # [batch, hidden]
        out = model.get_output_embeddings()
        ids = torch.tensor(self.yes_ids + self.no_ids, device=h.device)
        with torch.autocast(device_type=h.device.type, enabled=False):
            logits = h.float() @ out.weight[ids].float().T  # [batch, yes + no]
            if getattr(out, "bias", None) is not None:
                logits = logits + out.bias[ids].float()
            cap = _softcap(model.config)
            if cap:
                logits = torch.tanh(logits / cap) * cap
            n = len(self.yes_ids)
            return torch.logsumexp(logits[:, :n], dim=1) - torch.logsumexp(logits[:, n:], dim=1)


def _softcap(config) -> float | None:
    """Gemma2/3's ``final_logit_softcapping`` (also inside a multimodal config's ``text_config``), else None."""
    cap = getattr(config, "final_logit_softcapping", None)
    text = getattr(config, "text_config", None)
    return cap if cap is not None else getattr(text, "final_logit_softcapping", None) if text is not None else None


KINDS: dict[str, Kind] = {k.name: k for k in (Encoder(), Decoder(), AnswerTokens())}
"""The kinds, by name (the ``model_kind`` parameter's values besides ``"auto"``)."""


def detect(config, where: str | os.PathLike = "the model") -> str:
    """The kind's name for a ``PretrainedConfig`` (or its ``config.json`` as a dict).

    In order: ``kitlib_kind`` (a kit-trained checkpoint says what it was trained as); a
    ``...ForCausalLM`` architecture: ``"answer-tokens"``; ``model_type`` in :data:`DECODER_TYPES`:
    ``"decoder"``; in :data:`ENCODER_TYPES`: ``"encoder"``; any other model with no causal-LM
    architecture: ``"encoder"`` too (:mod:`kitlib.models.limits` says what it can take).

    Raises:
        ValueError: none of these says (naming the model type, the architectures and the override).
    """
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    if get(KIND_KEY):
        return get(KIND_KEY)
    archs, model_type = get("architectures") or [], get("model_type")
    if any(a.endswith("ForCausalLM") for a in archs):
        return "answer-tokens"
    if model_type in DECODER_TYPES:
        return "decoder"
    if model_type in ENCODER_TYPES or not any(a.endswith("LMHeadModel") for a in archs):
        return "encoder"
    raise ValueError(f"{where}: model_type {model_type!r} (architectures {archs}) is not a known encoder "
                     f"{ENCODER_TYPES} or decoder {DECODER_TYPES}; name the kind: kind={sorted(KINDS)}")


def kind_for(path: str | os.PathLike, kind: str = "auto", *, prompt: Prompt | None = None,
             label: str = "toxic") -> Kind:
    """The kind of checkpoint folder ``path``: detected from ``config.json`` (:func:`detect`) or ``kind``.

    The result carries the folder's text prefix (``kitlib_text_prefix``), ``label`` and, for
    answer tokens, ``prompt`` (None: the template the folder was trained with, :data:`PROMPT_KEY`, else the default); it is not yet bound to a tokenizer (:meth:`Kind.bind`).

    Raises:
        ValueError: an unknown ``kind``, or ``"auto"`` that cannot tell (see :func:`detect`).
        FileNotFoundError: ``path`` has no ``config.json``.
    """
    from ..checkpoint import PREFIX_KEY
    from .config import read_config

    config = read_config(path)
    name = detect(config, path) if kind == "auto" else kind
    if name not in KINDS:
        raise ValueError(f"kind={name!r} is not one of 'auto', {', '.join(map(repr, KINDS))}")
    if prompt is None and config.get(PROMPT_KEY):  # the template a kit-trained folder was trained with
        prompt = Prompt(template=config[PROMPT_KEY])
    extra = {"prompt": prompt} if name == "answer-tokens" and prompt is not None else {}
    return dataclasses.replace(KINDS[name], prefix=config.get(PREFIX_KEY, ""), label=label, **extra)


def head_names(config) -> tuple:
    """The module names kept float32 for a model of this config (its kind's :attr:`Kind.head`); ``()`` if unknown."""
    try:
        return KINDS[detect(config)].head
    except ValueError:
        return ("classifier",)
