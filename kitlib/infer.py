"""Multi-device inference as one call: ``predict(job, rt)`` -> the merged submission.

::

    rt = detect_runtime(num_devices, accelerator)        # touches no device
    job = InferJob(checkpoint=..., test_csv=..., shard_dir=..., output_csv="submission.csv",
                   sample_submission="sample_submission.csv")
    result = predict(job, rt)                            # a kitlib.outputs.merge.MergeResult

In the calling process :func:`predict` checks everything first, tokenizes the test CSV once into a folder
the replicas map (:func:`tokenize_test_set`) and chooses the padded lengths (:func:`padded_lengths`). Each
replica (:func:`_mp_fn`) takes its rows split by tokens (:func:`kitlib.run.balance.split_by_tokens`), runs
fixed-shape batches and writes one shard (:mod:`kitlib.outputs.shards`); the shards of this run alone are
merged (:func:`merge_run`). The model is asked of its kind (:mod:`kitlib.models.kinds`), never branched on
(:func:`model_kind`, :func:`load_for_inference`). A failed replica raises
:class:`kitlib.run.runtime.ReplicaError` naming its rank: nothing is merged.

A group of checkpoints (folds, seeds) is predicted member by member and blended (:func:`resolve_members`,
:func:`predict_members`); :mod:`kitlib.cv.groups` writes and scores such groups.

Multi-host (every host runs ``predict``): the shard folder and the submission may be URLs
(:mod:`kitlib.storage`); global rank 0 clears old shards, every replica takes its run id
(:func:`agreed_run_id`) and writes its shard, then global rank 0 merges and ``predict`` returns None
elsewhere. A shard folder that is not shared makes the merge refuse, naming the ranks it cannot see.
Replica programs keep no module-level state: on ``xla-cpu`` replicas are threads of one process.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import storage
from .outputs import provenance
from .run import heap
from .run.balance import split_by_tokens
from .run.backends.precision import check as check_precision
from .models.weights import WEIGHTS
from .run.backends.precision import Precision, check_float32_logits, check_inference
from .outputs.collapse import POLICIES
from .checkpoint import HISTORY_FILE, MODEL_SETTINGS, run_ids_of
from .data import PlannedBatches, Tokens, choose_bucket_lengths, plan_batches, read_ids, tokenize_csv
from .outputs.merge import MergeResult, merge_shards
from .models.limits import preflight
from .models.kinds import Encoder, Kind
from .models.model import check_ready_for_inference, find_checkpoints, resolve_checkpoint
from .run.replica import PeerFailed
from .run.runtime import Runtime, holds_global_rank0, launch
from .outputs.shards import SHARD_RE, clear_shards, read_shard_info, write_shard
from .outputs.submission_csv import NO_SAMPLE

TOKENS_DIR = "tokens"  # kitlib.data.Tokens, in a local temporary folder of the calling process
PATH_FIELDS = ("checkpoint", "test_csv", "shard_dir", "output_csv", "sample_submission", "base")  # InferJob's paths


@dataclass(frozen=True)
class InferJob:
    """What to predict and where to put it (nothing about the devices: that is the runtime's).

    Attributes:
        checkpoint: local folder with the transformers checkpoint and tokenizer
            (from :func:`kitlib.models.model.resolve_checkpoint`).
        test_csv: the CSV to predict (``id_col`` plus a text column).
        shard_dir: folder the per-rank shards are written to (cleared of older shards first);
            a local path or a URL (``gs://``, ``s3://``, ``file://``; :mod:`kitlib.storage`), one run
            at a time: the merge refuses another run's shards there.
        output_csv: the merged submission (a path or a URL); None: write the shards only.
        sample_submission: Kaggle's ``sample_submission.csv``: the submission's row order and
            columns (checked before any replica starts: :func:`check_outputs`); None or ``"none"``:
            the test set's order.
        batch_size: rows per model call on each replica (global batch = batch_size x world size).
        max_len: tokens per row; longer texts are truncated. At most the model's position table
            (:func:`kitlib.models.limits.check_max_len`).
        num_buckets: on XLA devices, pad each batch to one of at most this many lengths; 1: every batch
            is ``max_len`` long (:func:`padded_lengths`).
        precision: ``"auto"``, ``"fp32"``, ``"bf16"`` or ``"fp16"`` (the rule: :mod:`kitlib.run.backends.precision`).
        prediction_column: name of the prediction column written (Kaggle's ``toxic``; the notebook's
            parameter: :func:`kitlib.outputs.submission_csv.choose_prediction_column`).
        label: the head's label read as the positive class (:func:`kitlib.models.model.prediction_column`),
            when it is not ``prediction_column`` (a head trained on ``label``, a submission column ``target``); None: the same.
        text_col: text column; None picks ``content`` or ``comment_text``.
        collapsed: a submission whose predictions barely vary: ``"warn"`` or ``"refuse"``
            (:func:`kitlib.outputs.collapse.policy_for`); None: :func:`kitlib.outputs.collapse.check_predictions`.
        kind: the model kind (:data:`kitlib.models.kinds.KINDS`: ``"encoder"``, ``"decoder"``, ``"answer-tokens"``);
            ``"auto"``: what the checkpoint's ``config.json`` says (:func:`kitlib.models.kinds.detect`).
        prompt: the answer-token form's template (``{text}`` once; :class:`kitlib.models.kinds.Prompt`);
            ``""``: :data:`kitlib.models.kinds.DEFAULT_TEMPLATE`. Other kinds ignore it.
        base: an adapter checkpoint's base model folder (:mod:`kitlib.models.adapters`); None: the one its
            record names. Refused when it is not that base.
        merge_adapters: fold the LoRA matrices into the base's weights once loaded; False: peft's ``PeftModel``.
        id_col: the id column of ``test_csv``, ``sample_submission`` and the submission (the CSV rules:
            :mod:`kitlib.outputs.submission_csv`).
        weights: ``"auto"`` or one of :data:`kitlib.models.weights.WEIGHTS` for a decoder's weights
            (:func:`weights_for`).
    """

    checkpoint: str
    test_csv: str
    shard_dir: str
    output_csv: str | None = None
    sample_submission: str | None = None
    batch_size: int = 32
    max_len: int = 128
    num_buckets: int = 4
    precision: str = "auto"
    prediction_column: str = "toxic"
    text_col: str | None = None
    collapsed: str | None = None
    label: str | None = None
    kind: str = "auto"
    prompt: str = ""
    base: str | None = None
    merge_adapters: bool = True
    weights: str = "auto"
    id_col: str = "id"

    @property
    def head_label(self) -> str:
        """The head's label read as P(positive): ``label``, else ``prediction_column``."""
        return self.label or self.prediction_column

    def __post_init__(self):
        if isinstance(self.sample_submission, str) and self.sample_submission.lower() == NO_SAMPLE:
            object.__setattr__(self, "sample_submission", None)  # "none", by name: the test set's order
        for name in PATH_FIELDS:  # once, up front: every reader and writer gets the same path (storage.normalise)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, storage.normalise(getattr(self, name)))
        for name in ("batch_size", "max_len", "num_buckets"):
            if getattr(self, name) < 1:
                raise ValueError(f"InferJob.{name} must be >= 1, not {getattr(self, name)}")
        if self.collapsed is not None and self.collapsed not in POLICIES:
            raise ValueError(f"InferJob.collapsed must be None or one of {POLICIES}, not {self.collapsed!r}")
        check_precision(self.precision, "InferJob.precision")
        if self.weights not in WEIGHTS:
            raise ValueError(f"InferJob.weights must be one of {', '.join(WEIGHTS)}, not {self.weights!r}")


@dataclass(frozen=True)
class _Plan:
    """What :func:`predict` works out once, in the calling process, for every replica."""

    job: InferJob
    tokens_file: str
    num_rows: int
    bucket_lengths: tuple[int, ...]
    kind: Kind = field(default_factory=Encoder)  # bound to the tokenizer (model_kind)
    base: str | None = None  # an adapter checkpoint's base folder (model_kind)
    weights: str | None = None  # the width the model's weights load at (weights_for); None: as saved
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    multi_host: bool = False  # True: every host runs predict(); the replicas clear, agree and wait (see predict)


def predict(job: InferJob, rt: Runtime, start_method: str = "fork") -> MergeResult | None:
    """Predict ``job.test_csv`` on every replica of ``rt`` and merge the shards.

    Args:
        job: an :class:`InferJob`.
        rt: from :func:`kitlib.run.runtime.detect_runtime`.
        start_method: ``"fork"`` (Kaggle notebooks) or ``"spawn"`` (Colab, scripts).

    Returns:
        The :class:`kitlib.outputs.merge.MergeResult` of the written submission, or None when
        ``job.output_csv`` is None (shards only) or, in a multi-host run, in every process but
        global rank 0's (:func:`kitlib.run.runtime.holds_global_rank0`).

    Raises:
        ValueError: a ``shard_dir`` the replicas cannot share (:func:`kitlib.storage.check_shared`), a model that
            cannot take the run (:func:`kitlib.models.limits.preflight`), a bad ``precision``, a sample submission
            that does not fit (:func:`check_outputs`), a plan that does not fit (:func:`weights_for`), a bad test
            CSV, a prompt field the test CSV lacks (:meth:`kitlib.models.kinds.Prompt.columns`); nothing started.
        FileNotFoundError: no such sample submission (or test file); nothing started.
        kitlib.run.runtime.ReplicaError: a replica failed (its rank and error named); nothing merged.
        kitlib.outputs.merge.MergeError: the shards cannot give a correct submission (:func:`merge_run`).
        kitlib.storage.CannotWrite: the shard or output folder cannot be written (checked first), or the
            submission at the end (full disk).
        kitlib.locks.FolderLocked: another run writes the same outputs (:func:`output_locks`); nothing written.
    """
    storage.check_shared(job.shard_dir)  # replicas write there, this process merges: before any work
    kind, tokenizer, base = model_kind(job)
    kind.row_columns(job.test_csv)  # a prompt field the test set gives nowhere: refused before any work
    folder = config_folder(job.checkpoint, base)
    checked = preflight(folder, max_len=job.max_len, device=rt.backend.device, target=job.head_label,
                        tokenizer=tokenizer, read_head=bool(kind.head))
    check_inference(job.precision, rt.backend.device)
    precision = rt.backend.resolve_precision(job.precision)  # once, here: every replica gets this object
    weights = weights_for(job, rt, precision, kind, folder, base)  # the memory plan, printed; refused if it cannot fit
    check_outputs(job, rt)  # what the merge at the end needs, before any work
    with output_locks(job, rt):  # after the checks (which write nothing), before the first write
        with tempfile.TemporaryDirectory(prefix="kitlib-tokens-") as tmp:
            tokens = tokenize_test_set(job, Path(tmp) / TOKENS_DIR, tokenizer, kind)
            checked.check_tokens(folder, tokens.ids, job.test_csv)  # every id below the embedding's rows
            plan = _Plan(job, str(Path(tmp) / TOKENS_DIR), tokens.num_rows,
                         padded_lengths(tokens.lengths, job, rt), kind, base, weights,
                         multi_host=rt.multi_host)
            del tokens  # the replicas map the folder; this process keeps no token of the test set
            heap.give_back_freed()  # what tokenizing freed, before a replica runs here (kitlib.run.heap)
            if not plan.multi_host:
                shard_dir = storage.as_path(job.shard_dir)
                shard_dir.mkdir(parents=True, exist_ok=True)
                clear_shards(shard_dir)
            launch(_mp_fn, plan, rt, start_method, precision=precision)
        if job.output_csv is None or not holds_global_rank0(rt):
            return None
        return merge_run(job, plan.run_id, rt.world_size)


def output_locks(job: InferJob, rt: Runtime) -> contextlib.ExitStack:
    """The run's hold on what it writes: one lock for the shard folder and one for the submission file
    (:func:`kitlib.locks.output_lock`, one per real folder or file, whatever link reaches it), taken in the
    process that merges (:func:`kitlib.run.runtime.holds_global_rank0`); none for a remote ``shard_dir``.

    Raises:
        kitlib.locks.FolderLocked: another run writes the same shard folder or submission; nothing started.
    """
    from .locks import output_lock

    stack = contextlib.ExitStack()
    if not holds_global_rank0(rt):
        return stack
    with stack:
        for target, what in ((job.shard_dir, "shard folder (shard_dir)"), (job.output_csv, "submission file (output_csv)")):
            local = None if target is None else storage.as_path(target)
            if isinstance(local, Path):
                stack.enter_context(output_lock(local, what))
        return stack.pop_all()


def weights_for(job: InferJob, rt: Runtime, precision: Precision, kind: Kind, folder: str,
                base: str | None, say=print) -> str | None:
    """The width the replicas load a decoder's weights at, by the one weights rule at inference
    (:func:`kitlib.models.weights.resolve_weights`, ``train=False``), each device's plan printed; None
    (as saved) for a kind that plans no memory (encoders). A base quantized in training keeps that width.

    Raises:
        ValueError: what the rule refuses (:func:`kitlib.models.memory.check_kind_width`, off CUDA, a plan that
            does not fit); another width than an adapter checkpoint's recorded one. Nothing has started then.
    """
    from .models import adapters, memory
    from .models.weights import resolve_weights

    memory.check_kind_width(job.weights, kind, job.checkpoint)  # the one rule, as training asks it
    if not kind.plans_memory:
        return None
    requested = job.weights
    recorded = adapters.read_record(job.checkpoint).get("weights") if base is not None else None
    if recorded:
        if requested not in ("auto", recorded):
            raise ValueError(f"weights={requested!r}: {job.checkpoint}'s adapters were trained on its base in "
                             f"{recorded} ({adapters.RECORD_FILE}), so the base loads that way; use weights='auto' "
                             f"or {recorded!r}")
        requested = recorded
    devices = memory.replica_devices(rt.backend.hardware, rt.world_size)
    return resolve_weights(requested, precision, memory.shape_of(folder), devices, batch=job.batch_size,
                           length=job.max_len, train=False, say=say).width


def check_outputs(job: InferJob, rt: Runtime) -> None:
    """What the run's end needs, checked before the first replica starts: the shard folder can be written,
    and, in the process that merges, the submission's folder too and the sample submission fits the test set
    (:func:`kitlib.outputs.submission_csv.check_sample_submission`).

    Raises:
        kitlib.storage.CannotWrite: a folder cannot be written (read-only, no permission).
        FileNotFoundError: no such sample submission, or test file.
        ValueError: the sample submission does not fit (the ids or columns named).
    """
    from .outputs.submission_csv import check_sample_submission

    storage.check_writable(job.shard_dir, "shard_dir", folder=True)
    if job.output_csv is None or not holds_global_rank0(rt):
        return
    storage.check_writable(job.output_csv, "output_csv")
    if job.sample_submission is not None:
        check_sample_submission(job.sample_submission, lambda: read_ids(job.test_csv, job.id_col), (job.prediction_column,),
                                test_path=job.test_csv, id_col=job.id_col)


def tokenize_test_set(job: InferJob, folder: Path, tokenizer=None, kind: Kind | None = None) -> Tokens:
    """``job.test_csv`` checked and tokenized into ``folder`` (:func:`kitlib.data.tokenize_csv`) by
    ``tokenizer`` and ``kind`` (None: :func:`model_kind`'s, worked out here): the rows as the kind
    renders them (:meth:`kitlib.models.kinds.Kind.packed`: its text prefix, the answer-token prompt with each
    row's fields, :meth:`kitlib.models.kinds.Kind.row_columns`).

    Memory in the calling process stays bounded: chunks of :data:`kitlib.data.CHUNK_ROWS` rows,
    the packed ids written to ``folder`` as they come (the replicas map them).
    """
    if tokenizer is None or kind is None:
        kind, tokenizer, _ = model_kind(job)
    return tokenize_csv(tokenizer, job.test_csv, folder, job.max_len, text_col=job.text_col, id_col=job.id_col,
                        fields=kind.row_columns(job.test_csv),
                        encode=lambda texts, rows: kind.packed(tokenizer, texts, job.max_len, rows))


def config_folder(checkpoint: str | os.PathLike, base: str | os.PathLike | None) -> str:
    """The folder whose ``config.json`` and tokenizer describe the model: the checkpoint, or, for an
    adapter checkpoint that holds none (written by :func:`kitlib.models.adapters.save_adapter` alone), its base."""
    return str(checkpoint if (Path(checkpoint) / "config.json").is_file() or base is None else base)


def model_kind(job: InferJob) -> tuple[Kind, object, str | None]:
    """``(kind, tokenizer, base)``: the checkpoint's model kind (``job.kind``, ``job.prompt``, ``job.head_label``)
    bound to its tokenizer (:meth:`kitlib.models.kinds.Kind.bind`), and, for an adapter checkpoint
    (:func:`kitlib.models.adapters.is_adapter`), the base folder its adapters load onto (else None).

    Raises:
        ValueError: an unknown kind, or one ``"auto"`` cannot tell (:func:`kitlib.models.kinds.kind_for`);
            a tokenizer the kind cannot read (:meth:`kitlib.models.kinds.Kind.bind`).
        FileNotFoundError: an adapter checkpoint whose base is not here (:func:`kitlib.models.adapters.base_of`).
    """
    from .models import adapters
    from .models.kinds import Prompt, kind_for

    base = str(adapters.base_of(job.checkpoint, job.base)) if adapters.is_adapter(job.checkpoint) else None
    folder = config_folder(job.checkpoint, base)
    kind = kind_for(folder, job.kind, prompt=Prompt(template=job.prompt) if job.prompt else None, label=job.head_label)
    tokenizer = kind.load_tokenizer(folder)
    return kind.bind(tokenizer), tokenizer, base


def what_the_model_sees(job: InferJob, row: int = 0) -> str:
    """What the model of ``job`` sees for row ``row`` of ``job.test_csv`` (:meth:`kitlib.models.kinds.Kind.seen`),
    to print before a run: the prompt and the text as tokenized, special tokens shown."""
    from .data import read_csv_checked, row_fields

    kind, tokenizer, _ = model_kind(job)
    df = read_csv_checked(job.test_csv, text_col=job.text_col, id_col=job.id_col, limit=row + 1,
                          fields=kind.row_columns(job.test_csv))
    return kind.seen(tokenizer, df["text"].iloc[row], job.max_len, **((row_fields(df) or [{}])[row]))


def merge_run(job: InferJob, run_id: str, world_size: int | None) -> MergeResult:
    """Merge this run's shards only: every shard in ``job.shard_dir`` must carry ``run_id`` (and
    ``world_size``, when known), else :class:`kitlib.outputs.merge.MergeError` (two runs share the folder)."""
    return merge_shards([job.shard_dir], job.output_csv, sample_submission=job.sample_submission,
                        test=None if job.sample_submission else job.test_csv, run_id=run_id, world_size=world_size,
                        writer=provenance.INFER, source=f"model {job.checkpoint}", collapsed=job.collapsed,
                        runs=run_ids_of(job.checkpoint), id_col=job.id_col)


EAGER_LENGTHS = 16  # at most this many padded lengths on an eager device (see padded_lengths)


def padded_lengths(lengths: np.ndarray, job: InferJob, rt: Runtime) -> tuple[int, ...]:
    """The lengths batches are padded to (rows are sorted by length on each replica when there are several).

    A few shapes, chosen once over the whole test set, so nothing a replica keeps per shape grows with the
    rows: on XLA (one compiled graph each) at most ``job.num_buckets`` multiples of 8
    (:func:`kitlib.data.choose_bucket_lengths`); on an eager device (the CPU's oneDNN keeps memory per shape
    it ran) at most :data:`EAGER_LENGTHS`, any multiple of 1, the last batch not filled up.

    Args:
        lengths: int ``[num_rows]``, tokens per row after truncation.

    Returns:
        Sorted distinct lengths, the last holding the longest row.
    """
    if rt.backend.static_shapes:
        return choose_bucket_lengths(lengths, job.max_len, job.num_buckets)
    return choose_bucket_lengths(lengths, job.max_len, EAGER_LENGTHS, multiple=1)


def predict_rows(model, tokens: Tokens, rows: np.ndarray, plan: _Plan, replica, kind: Kind | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Run the model over ``rows`` (token rows, repeats allowed) in fixed-shape batches; ``kind`` (None:
    ``plan.kind``, bound to ``model``'s head) reads each row's float32 positive logit.

    Batches are sorted by length when there are several bucket lengths; on XLA the last one is
    filled up with filler slots (which are dropped), so every batch has a configured shape.

    Returns:
        ``(positions, probs)``: int64 ``[n]`` indices into ``rows`` and float32 ``[n]``, one per
        entry of ``rows``, in the order the batches ran.
    """
    import torch
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    job, kind = plan.job, kind or plan.kind.bind_model(model)
    buckets = plan.bucket_lengths if len(plan.bucket_lengths) > 1 else ()
    positions = np.arange(len(rows), dtype=np.int64)
    plans = plan_batches(positions, job.batch_size, plan.bucket_lengths[-1], tokens.lengths[rows], buckets,
                         fill_last=replica.static_shapes)
    dataset = PlannedBatches(tokens, plans, index=rows)
    loader = replica.loader(DataLoader(dataset, batch_size=None, shuffle=False, num_workers=0))
    # Memory must not grow with the batches (kitlib.run.heap): one buffer for the rank's logits,
    # allocated at the first batch, instead of a small tensor kept from every batch among its freed
    # temporaries; and what the batches freed is given back every heap.EVERY batches.
    logits, at = None, 0
    with torch.no_grad(), replica.autocast():
        for i, batch in enumerate(tqdm(loader, total=len(plans), desc="predict (master)", disable=not replica.is_master)):
            out = kind.positive_logit(model, **replica.to_device(batch)).cpu()[:, None]
            if logits is None:
                logits = torch.empty((sum(len(p.rows) for p in plans), 1), dtype=out.dtype)
            logits[at : at + len(out)] = out
            at += len(out)
            del out, batch
            if i % heap.EVERY == heap.EVERY - 1:
                heap.give_back_freed()
    logits = logits if logits is not None else torch.zeros(0, 1)
    check_float32_logits(logits, f"replica rank {replica.rank}")  # the float32 head, checked, not assumed
    probs = torch.sigmoid(logits[:, 0]).numpy()  # (the kind's positive logit: Kind.probabilities' rule)
    order = np.concatenate([p.rows for p in plans]) if plans else np.zeros(0, np.int64)
    keep = order >= 0
    return order[keep], probs[keep].astype(np.float32)


def _mp_fn(replica, plan: _Plan) -> None:
    """One replica's inference: predict this rank's rows and write its shard.

    Args:
        replica: the :class:`kitlib.run.replica.Replica` the launcher built.
        plan: the :class:`_Plan` from :func:`predict`.
    """
    from .models import adapters

    job = plan.job
    rank, world = replica.rank, replica.world_size
    run_id = plan.run_id
    if plan.multi_host:  # rank 0 alone clears the shared folder; the exchange is the barrier before any write
        with _across_hosts(replica, "clearing old shards"):
            if replica.is_master:
                storage.as_path(job.shard_dir).mkdir(parents=True, exist_ok=True)
                clear_shards(job.shard_dir)
        run_id = agreed_run_id(replica, run_id)
    tokens = Tokens.load(plan.tokens_file)
    rows = split_by_tokens(tokens.lengths, world)[rank]  # this rank's rows, by tokens (kitlib.run.balance)
    kind, model = load_for_inference(plan, replica)
    start = time.perf_counter()
    positions, probs = predict_rows(model, tokens, rows, plan, replica, kind)
    stats = {"rows": int(len(positions)), "batches": -(-len(positions) // job.batch_size),
             "tokens": int(tokens.lengths[rows].sum()), "seconds": round(time.perf_counter() - start, 3),
             "device": replica.device_name(),
             "precision": replica.precision.name, "weights": adapters.loaded_width(model), **replica.compile_stats()}
    ids = read_ids(job.test_csv, job.id_col)
    done = rows[positions]

    def write() -> None:
        write_shard(job.shard_dir, rank=rank, world_size=world, num_rows=plan.num_rows, rows=done,
                    ids=ids[done], predictions={job.prediction_column: probs}, padding=np.zeros(len(done), bool),
                    run_id=run_id, stats=stats)

    if not plan.multi_host:
        write()
        return
    with _across_hosts(replica, "writing the shards"):  # the barrier: every shard is written before rank 0 merges
        write()


def load_for_inference(plan: _Plan, replica) -> tuple[Kind, object]:
    """``(kind, model)``: the plan's model loaded as its kind says at the plan's weights width (:func:`weights_for`),
    an adapter checkpoint's base once with the adapters on top (:func:`kitlib.models.open.open_model`), its
    head float32, on the replica's device; the kind bound to the model's head (:meth:`kitlib.models.kinds.Kind.bind_model`).
    """
    from .models import adapters
    from .models.open import open_model

    job, kind = plan.job, plan.kind
    model = open_model(job.checkpoint, kind=kind, width=plan.weights, base=plan.base, merge=job.merge_adapters,
                       device=replica.device, precision=replica.precision, xla=replica.xla)
    kind = kind.bind_model(model)
    kind.keep_head_float32(model)
    return kind, model if adapters.quantized_width(model) else model.to(replica.device)


@contextlib.contextmanager
def _across_hosts(replica, what: str):
    """``replica.together(what)``, naming the likely cause when the exchange itself fails.

    A host that dies closes its connections and the others' collective raises: RuntimeError saying so;
    an error of the block itself is raised as it is.
    """
    done = False
    try:
        with replica.together(what):
            yield
            done = True
    except PeerFailed:
        raise
    except RuntimeError as e:
        if not done:
            raise
        raise RuntimeError(
            f"lost another host while {what}: it died or cannot be reached ({e}). Nothing is merged and no "
            "submission is written; start the run again on every host"
        ) from e


def agreed_run_id(replica, run_id: str) -> str:
    """Global rank 0's ``run_id`` (32 hex digits), on every replica of a multi-host run.

    Every host draws its own id; rank 0's is sent to all (an all-reduce, the other ranks adding zeros).
    """
    import torch

    code = torch.tensor(list(bytes.fromhex(run_id)), dtype=torch.float32) * float(replica.is_master)
    code = replica.all_reduce_sum(code.to(replica.device)).cpu()
    return bytes(int(v) for v in code.round().tolist()).hex()


def replica_stats(shard_dir: str | Path, run_id: str | None = None) -> list[dict]:
    """Each shard's rank, rows and the figures its replica recorded (tokens, seconds, batches, compilations).

    Args:
        shard_dir: the run's ``InferJob.shard_dir``.
        run_id: only the shards of this run (``MergeResult.run_id``), as the merge reads them
            (:func:`merge_run`): a folder two runs share holds the other run's shards too. None:
            every kit shard in the folder.

    Returns:
        One dict per kit shard (a parquet file without the kit's metadata is left out), sorted
        by file name: ``rank``, ``world_size``, ``run_id`` and the replica's stats; ``tokens`` is the sum of
        its rows' token counts after truncation (the split's measure, :func:`kitlib.run.balance.split_by_tokens`).
        ``xla_compiles`` is the replica's own count; ``xla_compiles_process`` (``xla-cpu``
        thread replicas) is the count of the process its threads share.
    """
    import pyarrow.parquet as pq

    out = []
    for f in sorted(p for p in storage.as_path(shard_dir).iterdir() if SHARD_RE.match(p.name)):
        info = read_shard_info(pq.read_schema(storage.readable(f)))
        if info is not None and (run_id is None or info.run_id == run_id):
            out.append({"rank": info.rank, "world_size": info.world_size, "run_id": info.run_id, **info.stats})
    return out


# --- a group of members (folds, seeds) predicted and blended: kitlib.cv.groups writes and scores such groups ---

BLENDS = ("mean", "rank")  # predict_members(blend=...): kitlib.outputs.blend's mean or rank mean


class GroupError(ValueError):
    """A group of checkpoints, or its out-of-fold predictions, that cannot give a correct blend or score."""


def member_tags(member: Path) -> dict:
    """The ``tags`` of a kit-trained member's ``train_history.json`` (``cv``, ``fold``, ``folds``; ``{}`` when none)."""
    return json.loads((member / HISTORY_FILE).read_text()).get("tags") or {}


GROUP_FILE = "group.json"  # <group>/group.json: the members this command asked for, by name (scripts/cv.py)
SHARED_SETTINGS = ("checkpoint", "pattern", "epochs", "batch_size", "max_len", "lr", "weight_decay", "recipe",
                   "label_col", "text_col", "train_limit", "valid_limit", "dropout", "precision", "monitor", "patience")


def read_group(group: str | os.PathLike) -> dict:
    """``<group>/group.json`` (``members``: names; ``requests``: per name what it was trained on), or ``{}``."""
    path = Path(group) / GROUP_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def members_of(folder: str | os.PathLike) -> list[Path]:
    """The members of a group folder: the names its ``group.json`` lists (:func:`kitlib.cv.groups.start_group`: exactly what
    the command asked for, other folders beside them are no members), else the kit-trained checkpoints in
    its subfolders (two levels down: a group the training notebook filled fold by fold), sorted by path.

    Raises:
        GroupError: a member ``group.json`` names that is not a trained checkpoint.
    """
    names = read_group(folder).get("members")
    if names is None:
        return sorted(find_checkpoints(folder, trained=True, max_depth=2))
    missing = [n for n in names if not (Path(folder) / n / HISTORY_FILE).is_file()]
    if missing:
        raise GroupError(f"{folder}/{GROUP_FILE} names member(s) {', '.join(missing)} with no trained checkpoint: "
                         "train them (make cv) before blending")
    return sorted(Path(folder) / n for n in names)


def check_settings(members: list[Path]) -> None:
    """Refuse a group whose members were trained two ways: every :data:`SHARED_SETTINGS` value of their
    ``train_history.json`` ``config`` (and the seed, for the folds of a cross-validation), and every
    :data:`kitlib.checkpoint.MODEL_SETTINGS` value of its ``model_settings``, must agree.

    Raises:
        GroupError: naming each setting that differs, its values and which members have them.
    """
    histories = {m: json.loads((m / HISTORY_FILE).read_text()) for m in members}
    folds = any("fold" in member_tags(m) for m in members)
    diffs = []
    for key in SHARED_SETTINGS + MODEL_SETTINGS + (("seed",) if folds else ()):
        by_value: dict[str, list[str]] = {}
        for m, h in histories.items():
            cfg = h.get("model_settings" if key in MODEL_SETTINGS else "config") or {}
            by_value.setdefault(repr(cfg.get(key, "(not recorded)")), []).append(m.name)
        if len(by_value) > 1:
            diffs.append(f"{key}: " + "; ".join(f"{v} ({', '.join(names)})" for v, names in by_value.items()))
    if diffs:
        raise GroupError(f"the group's members were trained two ways ({' | '.join(diffs)}): a blend or report of them "
                         "is no one run; train them again with one setting (make cv) or blend the files on purpose "
                         "(python -m kitlib blend)")


def check_group(members: list[Path]) -> list[Path]:
    """``members`` sorted by path, after checking that every cross-validation run among them (by its
    ``cv`` tag) is there whole: folds ``0..K-1``, each once.

    Raises:
        GroupError: a fold missing or twice, or folds of one run disagreeing on K; naming the run,
            the folds and the folders; members trained two ways (:func:`check_settings`).
    """
    runs: dict[str, list] = {}
    for m in members:
        t = member_tags(m)
        if "cv" in t:
            runs.setdefault(t["cv"], []).append((t.get("fold"), t.get("folds"), m))
    for cv_id, got in runs.items():
        ks = {k for _, k, _ in got}
        folds = sorted(f for f, _, _ in got)
        k = max(ks)
        if len(ks) > 1 or folds != list(range(k)):
            where = ", ".join(f"fold {f}: {m}" for f, _, m in sorted(got, key=lambda x: x[0]))
            raise GroupError(f"cross-validation run {cv_id}: folds {folds} of {sorted(ks)}, not 0..{k - 1} each once "
                             f"({where}); attach or train every fold (make cv, kaggle_kit run --folds {k})")
    check_settings(members)
    return sorted(members)


def member_labels(members: list[Path]) -> list[str]:
    """A short unique name per member: its folder's name (``fold-0``), or its path below the folders'
    common part with ``/`` as ``-`` when names repeat (seed kernels' ``<slug>/artifacts/xlmr-toxic``)."""
    names = [m.name for m in members]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(m) for m in members]))
    return [str(m.relative_to(common)).replace(os.sep, "-") for m in members]


def resolve_members(model: str, **resolve_kwargs) -> list[Path]:
    """The checkpoint(s) the inference notebook predicts with: one, or a group to blend.

    * a folder without ``config.json`` whose subfolders are kit-trained checkpoints (:func:`members_of`);
    * ``"auto"``, where the working folder holds no trained checkpoint and more than one kit-trained
      checkpoint is attached under ``search_dir`` (the fold or seed kernels): every one of them;
    * else the one :func:`kitlib.models.model.resolve_checkpoint` gives.

    Every member is checked as a named folder is (:func:`kitlib.models.model.check_ready_for_inference`).

    Raises:
        GroupError: a group with a fold missing or twice (:func:`check_group`), attached for ``"auto"`` too.
        FileNotFoundError: a folder with no checkpoint in it or below; what :func:`kitlib.models.model.resolve_checkpoint` raises.
        ValueError: a member that is not ready (:func:`kitlib.models.model.check_ready_for_inference`).
    """
    p = Path(model)
    if model != "auto" and p.is_dir() and not (p / "config.json").is_file():
        found = members_of(p)
        if not found:
            raise FileNotFoundError(f"model={model!r}: a folder with no config.json and no checkpoint written by the "
                                    "training notebook in its subfolders; pass a checkpoint folder or a group folder (artifacts/cv)")
        return [check_ready_for_inference(m, f"model={model!r}, member {m.name}") for m in check_group(found)]
    trained, search = resolve_kwargs.get("trained_dir"), resolve_kwargs.get("search_dir")
    if model == "auto" and not (trained and (Path(trained) / "config.json").is_file()) and search is not None:
        found = check_group(find_checkpoints(search, trained=True))  # a fold group refused with any fold missing, one fold attached too
        if len(found) > 1:
            return [check_ready_for_inference(m, f"model='auto', attached member {m}") for m in found]
    return [resolve_checkpoint(model, **resolve_kwargs)]


def predict_members(job, members: list[Path], rt, start_method: str = "fork", *, blend: str = "mean",
                    pred_dir: str | os.PathLike):
    """Predict ``job``'s test rows with every member, keep each member's predictions, blend them.

    Each member runs :func:`predict` with ``job``'s settings (its ``checkpoint`` and ``output_csv`` replaced:
    ``<pred_dir>/<label>.csv``, :func:`member_labels`); the predictions are then blended by
    :func:`kitlib.outputs.blend.blend` (``blend="rank"``: the rank mean) into ``job.output_csv``.

    Returns:
        The last member's :class:`kitlib.outputs.merge.MergeResult`, with ``output`` the blend and ``notes`` every
        member's notes plus one line naming the blend; None on a host that does not merge (multi-host).

    Raises:
        ValueError: ``blend`` not in :data:`BLENDS`; what :func:`predict` and
            :func:`kitlib.outputs.blend.blend` raise (nothing is written to ``job.output_csv`` then).
    """
    from .outputs import blend as blending

    if blend not in BLENDS:
        raise ValueError(f"blend must be one of {', '.join(BLENDS)}, not {blend!r}")
    pred_dir = Path(pred_dir)
    pred_dir.mkdir(parents=True, exist_ok=True)
    outputs, notes, result = [], [], None
    for member, label in zip(members, member_labels(members)):
        print(f"== member {label}: {member}")
        result = predict(replace(job, checkpoint=str(member), output_csv=str(pred_dir / f"{label}.csv")), rt, start_method)
        if result is None:
            continue
        outputs.append(result.output)
        notes += [f"{label}: {n}" for n in result.notes]
    if result is None:
        return None
    if len(outputs) == 1:
        import shutil

        shutil.copyfile(outputs[0], job.output_csv)
        return replace(result, output=Path(job.output_csv), notes=notes)
    b = blending.blend(outputs, job.output_csv, rank=blend == "rank", sample_submission=job.sample_submission,
                       id_col=job.id_col)
    notes.append(f"blend ({blend}) of {len(outputs)} models' predictions, each kept in {pred_dir}")
    return replace(result, output=b.output, notes=notes)
