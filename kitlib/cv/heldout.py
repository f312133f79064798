"""A training notebook's rows as one call: which train and which are held out (:func:`make_split`), what the held-out
rows are called (:data:`HELDOUT_NAMES`, the one home of those words), and their scoring at the end (:func:`score_heldout`).

Both training notebooks (``notebooks/xla_ddp_train.py`` and ``notebooks/ttt_train_predict.py``) call
:func:`make_split` with their parameters; it reads the files the parameters name (``data_dir``, ``train_csv``,
``valid_csv`` or ``test_csv``, ``id_col``), draws the split the module :mod:`kitlib.cv.splits` writes down (``split``,
``holdout_frac``, ``seed``; the test-time split for the test-time kernel), then, with ``folds=K``, fold ``fold`` of
the training part (:mod:`kitlib.cv.folds`), and returns a :class:`Split`: the training rows, the rows scored after
every epoch (``TrainJob.valid_csv``: the hand-off's rows), the rows scored once at the end through the inference path,
and their names. :func:`kitlib.training.job.job_from_params` builds the job from it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pandas as pd

from .splits import SPLITS, english_holdout_split, holdout_split, resolve_split, ttt_split, validation_split

TEST_TIME = "test-time"  # the test-time kernel's split (kitlib.cv.splits.ttt_split): no ``split`` parameter
# What the rows scored after every epoch are called, by split: the prints, the hand-off's messages, the ROC curve's
# legend and heldout_scores.json's "rows" say these words, and nothing else spells them.
HELDOUT_NAMES = {"english": "held-out English", "validation": "held-out multilingual", "holdout": "held-out",
                 TEST_TIME: "held-out"}
VALIDATION_NAME = "multilingual validation"  # the whole validation file, scored (split "english")


@dataclass(frozen=True)
class Split:
    """The rows of one training run, as :func:`make_split` wrote them down.

    Attributes:
        name: the split (a key of :data:`kitlib.cv.splits.SPLITS`, or :data:`TEST_TIME`).
        train_csv: the rows trained on (``TrainJob.train_csv``).
        heldout_csv: the rows scored after every epoch (``TrainJob.valid_csv``), never trained on; the hand-off's.
        heldout_name: what those rows are called (:data:`HELDOUT_NAMES`; ``"fold <i>"`` with folds).
        final_csv: the rows scored once at the end through the inference path (:func:`score_heldout`); None: none.
        final_name: what those rows are called.
        label_col, text_col: the label column and the text column (None: the kit's choice) of every part.
        data_dir: the data folder the files came from.
        sources: the files as given (the training file and the validation or test file that exist): what
            ``model="auto"`` checks is the bundled sample (:func:`kitlib.models.model.resolve_checkpoint`).
        out_dir: fold ``i``'s checkpoint folder (``<group>/fold-<i>``) with folds; None: the notebook's.
        tags: ``TrainJob.tags`` (a fold's: :func:`kitlib.cv.groups.fold_tags`), ``{}`` without folds.
        test_csv, test_label_col: the test set and its label column (the test-time split only).
        counts: rows per part (the test-time split: ``train_rows``, ``labelled_test_rows``, ``holdout_rows``,
            ``test_rows``); ``{}`` for the others (:meth:`table` counts them).
    """

    name: str
    train_csv: Path
    heldout_csv: Path
    heldout_name: str
    final_csv: Path | None
    final_name: str | None
    label_col: str
    text_col: str | None
    data_dir: Path
    sources: tuple[Path, ...]
    out_dir: Path | None = None
    tags: dict = field(default_factory=dict)
    test_csv: Path | None = None
    test_label_col: str = ""
    counts: dict = field(default_factory=dict)

    def table(self, train_limit: int = 0, valid_limit: int = 0) -> pd.DataFrame:
        """The parts as a table to show: rows (the first ``train_limit`` / ``valid_limit`` only, as the run reads
        them; 0: all) and the label's share, read from the files; the test-time split: the rows of each part."""
        from ..data import read_csv_checked

        if self.name == TEST_TIME:
            c = self.counts
            rows = [c["labelled_test_rows"], c["train_rows"], min(c["holdout_rows"], valid_limit or c["holdout_rows"]),
                    c["test_rows"]]
            return pd.DataFrame({"rows": rows}, index=[
                f"test, labelled ({self.test_label_col or 'none'}): trained first", "training file: trained",
                "training file: held out, scored", "test: predicted"])
        parts = {"train": (self.train_csv, train_limit), f"scored every epoch ({self.heldout_name})": (self.heldout_csv, valid_limit)}
        if self.final_csv is not None:
            parts[f"scored at the end ({self.final_name})"] = (self.final_csv, 0)
        read = {k: read_csv_checked(p, text_col=self.text_col, label_cols=(self.label_col,), limit=n or None)[self.label_col]
                for k, (p, n) in parts.items()}
        return pd.DataFrame({"rows": [len(v) for v in read.values()],
                             f"{self.label_col} share": [float(v.mean()) for v in read.values()]}, index=list(read))


def _path(value: str, default) -> Path:
    """A notebook's path parameter: ``value`` as the kit reads a path (:func:`kitlib.storage.as_path`), or the
    ``default`` (a callable, called only then: a default may refuse, e.g. no training file) for ``""``."""
    from ..storage import as_path

    return as_path(value) if value else Path(default())


def make_split(params: Mapping, split: str | None = None) -> Split:
    """The rows a training notebook's run trains on and holds out, from its parameters: one call, both notebooks.

    Args:
        params: the notebook's parameters (its ``globals()``): ``data_dir``, ``train_csv``, ``id_col``, ``text_col``,
            ``label_col``, ``holdout_frac``, ``seed``; the training notebook's ``valid_csv``, ``split``, ``folds``,
            ``fold``, ``pseudo_csv`` and ``output_dir``; the test-time kernel's ``test_csv`` and ``test_label_col``.
            ``""`` is each path's default (the bundled sample, or the competition's data on Kaggle).
        split: ``None``: the ``split`` parameter (:func:`kitlib.cv.splits.resolve_split`); :data:`TEST_TIME`: the
            test-time kernel's (:func:`kitlib.cv.splits.ttt_split`).

    The parts are written under :func:`kitlib.paths.scratch_dir` (a file whose ``id_col`` is not ``id`` is first
    copied with it named ``id``: :func:`kitlib.data.kit_id_copy`); each writer prints its notes, and this prints the
    rule (and the fold).

    Returns:
        A :class:`Split`.

    Raises:
        kitlib.cv.folds.FoldsError: ``folds``, ``fold`` or ``pseudo_csv`` name no fold (checked first, before any file
            is read). ValueError, FileNotFoundError: as the split's writer raises them (a bad ``split`` or
            ``holdout_frac``, a missing file or column, a class too small to hold out), each naming the parameter.
    """
    from .. import paths
    from ..data import kit_id_copy
    from .folds import check_fold_parameters

    pseudo = check_fold_parameters(params.get("folds", 0), params.get("fold", -1), params.get("pseudo_csv", ""))
    root = paths.project_root()
    data = _path(params.get("data_dir", ""), lambda: paths.default_data_dir(root))
    source = _path(params.get("train_csv", ""), lambda: paths.train_file(data))
    scratch = paths.scratch_dir(root)
    train = kit_id_copy(source, params.get("id_col", "id"), scratch / "id-columns")  # id_col read as the kit's "id"
    columns = dict(label_col=params["label_col"], text_col=params.get("text_col") or None)
    if split == TEST_TIME:
        return _test_time(params, data, source, train, scratch / "test-time-split", columns)
    return _with_folds(params, _training_split(params, data, source, train, scratch, columns), pseudo, scratch)


def _training_split(params: Mapping, data: Path, source: Path, train: Path, scratch: Path, columns: dict) -> Split:
    """The training notebook's split (``split``: ``"english"``, ``"validation"`` or ``"holdout"``) of ``train``."""
    from ..data import kit_id_copy

    given = _path(params.get("valid_csv", ""), lambda: data / "validation.csv")
    name = resolve_split(params["split"], given)  # "auto": "english" with a validation file, else "holdout"
    valid = kit_id_copy(given, params.get("id_col", "id"), scratch / "id-columns") if given.is_file() else given
    frac, seed = params["holdout_frac"], params["seed"]
    if name == "validation":  # the second half of validation.csv held out, scored every epoch and at the end
        train, heldout = validation_split(train, valid, scratch / "validation-holdout", **columns)
        final = heldout
    elif name == "holdout":
        train, heldout = holdout_split(train, scratch / "holdout", frac=frac, seed=seed, **columns)
        final = heldout
    elif frac:  # "english": a share of the English rows held out; validation.csv scored whole at the end
        train, heldout = english_holdout_split(train, scratch / "english-holdout", frac=frac, seed=seed, **columns)
        final = valid
    else:  # "english" with holdout_frac 0: validation.csv scored every epoch, nothing more at the end
        heldout, final = valid, None
    print(f"split {name!r}: {SPLITS[name]}")
    named = lambda rows: None if rows is None else VALIDATION_NAME if rows == valid else HELDOUT_NAMES[name]
    return Split(name, train, heldout, named(heldout), final, named(final), data_dir=data,
                 sources=tuple(p for p in (source, given) if p.is_file()), **columns)


def _with_folds(params: Mapping, split: Split, pseudo: str, scratch: Path) -> Split:
    """``split`` with fold ``fold`` of its training rows held out instead (``folds=K``: the fold's rows are scored
    every epoch and give its out-of-fold predictions; the others, with ``pseudo`` rows, train); as is without folds."""
    import dataclasses

    from .. import paths
    from .folds import fold_split, write_folds
    from .groups import FOLDS_DIR, fold_tags

    folds, fold = params.get("folds", 0), params.get("fold", -1)
    if not folds:
        return split
    group = _path(params.get("output_dir", ""), lambda: paths.working_dir(paths.project_root()) / paths.CV_GROUP)
    folds_csv = write_folds(split.train_csv, group / FOLDS_DIR, folds, label_col=split.label_col)
    train, valid = fold_split(split.train_csv, folds_csv, fold, scratch / "folds" / f"fold-{fold}", pseudo or None)
    print(f"fold {fold} of {folds} ({folds_csv})" + (f"; + pseudo-labelled rows {pseudo}" if pseudo else ""))
    return dataclasses.replace(split, train_csv=train, heldout_csv=valid, heldout_name=f"fold {fold}",
                               out_dir=group / f"fold-{fold}", tags=fold_tags(folds_csv, fold, pseudo or None))


def _test_time(params: Mapping, data: Path, source: Path, train: Path, out_dir: Path, columns: dict) -> Split:
    """The test-time kernel's split: the test set's labelled rows first, then the training file's less a held-out share."""
    from ..data import iter_csv_checked

    test = _path(params.get("test_csv", ""), lambda: data / "test.csv")
    label = params.get("test_label_col", "")
    fit, heldout, counts = ttt_split(train, test, out_dir, params["holdout_frac"], params["seed"], test_label_col=label,
                                     **columns)
    counts["test_rows"] = sum(len(chunk) for chunk in iter_csv_checked(test, text_col=columns["text_col"]))
    return Split(TEST_TIME, fit, heldout, HELDOUT_NAMES[TEST_TIME], None, None, data_dir=data, sources=(source, test),
                 test_csv=test, test_label_col=label, counts=counts, **columns)


def score_heldout(job, split: Split, rt, start_method: str = "fork") -> dict | None:
    """Score ``split.final_csv`` with the saved checkpoint ``job.out_dir`` through the inference path
    (:func:`kitlib.infer.predict`, as the inference notebook will load it), overall and per language (a ``lang``
    column), print both, and save them beside the checkpoint (:func:`kitlib.training.runs.save_scores`:
    ``heldout_scores.json``, the runs table's ``heldout_auc``); with folds, also the fold's out-of-fold predictions
    (:func:`kitlib.cv.groups.save_oof`).

    Args:
        job: the run's :class:`kitlib.training.job.TrainJob` (its folder, batch, length, label and text column).
        split: the run's :class:`Split`.
        rt, start_method: the runtime predicted on.

    Returns:
        The scores saved (``rows``: the rows' name, ``csv``, ``split``, ``roc_auc``: NaN for one class, ``per_language``,
        ``num_rows``, ``predict_seconds``, ``predictions``: the predictions CSV), or None when ``split`` scores
        nothing at the end.
    """
    from ..data import csv_columns, read_csv_checked, read_csv_strings
    from ..infer import InferJob, predict
    from ..metrics import auc_text
    from ..paths import scratch_dir
    from ..training.runs import save_scores
    from .groups import HELDOUT_PREDICTIONS_FILE, save_oof

    if "fold" in split.tags:
        print(f"out-of-fold predictions of fold {split.tags['fold']}: {save_oof(job.out_dir, job.valid_csv, job.label_col)}")
    if split.final_csv is None:
        return None
    t0, label = time.perf_counter(), job.label_col
    out = predict(InferJob(checkpoint=job.out_dir, test_csv=str(split.final_csv), shard_dir=str(scratch_dir() / "shards" / "validation"),
                           output_csv=str(Path(job.out_dir) / HELDOUT_PREDICTIONS_FILE), batch_size=job.batch_size,
                           max_len=job.max_len, prediction_column=label, text_col=job.text_col, collapsed="warn"),
                  rt, start_method)  # held-out rows, not a submission: the hand-off judges the model
    pred = pd.read_csv(out.output, dtype={"id": str}, keep_default_na=False)
    truth = read_csv_checked(split.final_csv, text_col=job.text_col, label_cols=(label,))
    truth["lang"] = read_csv_strings(split.final_csv)["lang"] if "lang" in csv_columns(split.final_csv) else ""
    rows = truth[["id", label, "lang"]].rename(columns={label: "truth"}).merge(pred[["id", label]], on="id")
    auc, shown = auc_text(rows["truth"].to_numpy(), rows[label].to_numpy(), str(split.final_csv), label)
    print(f"{split.final_name} ROC AUC: {shown} ({len(rows)} rows)")
    per_lang, said = {}, []
    for lang, g in rows[rows["lang"] != ""].groupby("lang"):
        per_lang[lang], text = auc_text(g["truth"].to_numpy(), g[label].to_numpy(), f"lang {lang}", label)
        said.append(f"{lang} {text}")
    if said:
        print("per language: " + ", ".join(said))
    scores = {"rows": split.final_name, "csv": str(split.final_csv), "split": split.name, "roc_auc": auc,
              "per_language": per_lang, "num_rows": len(rows), "predict_seconds": time.perf_counter() - t0,
              "predictions": str(out.output)}
    save_scores(job.out_dir, scores)
    return scores
