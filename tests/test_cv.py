"""Folds, out-of-fold predictions, group blends and pseudo-labels (kitlib/cv/folds.py, kitlib/cv/groups.py, kitlib/cv/pseudo.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kitlib import infer
from kitlib.cv import groups as cv
from kitlib.cv.folds import FoldsError, check_fold_parameters, fold_split, read_folds, strata, write_folds
from kitlib.metrics import roc_auc
from kitlib.cv.splits import validation_split

from conftest import SAMPLE, write_slice


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """make submission's split of the sample: 2,799 training rows (en + the first half of validation.csv), 500 held out."""
    return validation_split(SAMPLE / "train.csv", SAMPLE / "validation.csv", tmp_path_factory.mktemp("split") / "s")


def read(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def test_folds_stratified_by_label_and_language_and_stable(split, tmp_path):
    train, holdout = split
    path = write_folds(train, tmp_path / "a" / "folds", 5)
    folds, rows = read(path), read(train)
    assert list(folds["id"]) == list(rows["id"])  # every training row, in file order, exactly once
    assert not set(folds["id"]) & set(read(holdout)["id"])  # held-out rows are in no fold
    f = folds["fold"].astype(int)
    assert sorted(f.unique()) == [0, 1, 2, 3, 4]
    table = pd.crosstab(strata(rows["toxic"].astype(float), rows["lang"], 5), f)
    assert set(table.index) >= {"0|en", "1|en", "0|tr", "0|es", "0|it"}  # label x language strata
    assert (table.max(axis=1) - table.min(axis=1)).max() <= 1  # each stratum spread evenly over the folds
    again = write_folds(train, tmp_path / "b" / "folds", 5)  # another machine, the same rows: the same file
    assert again.read_bytes() == path.read_bytes()
    assert write_folds(train, tmp_path / "a" / "folds", 5) == path  # reused as it is
    meta = json.loads((path.parent / "folds.json").read_text())
    assert meta["rows"] == len(rows) == sum(v["rows"] for v in meta["per_fold"].values())


def test_a_folds_file_that_does_not_match_the_data_is_refused(split, tmp_path):
    train, _ = split
    path = write_folds(train, tmp_path / "folds", 3)
    with pytest.raises(FoldsError, match=r"made with folds=3, not 5"):
        write_folds(train, tmp_path / "folds", 5)
    fewer = tmp_path / "fewer.csv"
    read(train).iloc[1:].to_csv(fewer, index=False)
    first_id = read(train)["id"].iloc[0]
    with pytest.raises(FoldsError, match=rf"does not match .*fewer.csv: 1 id\(s\) not among its rows \('{first_id}'\); delete"):
        read_folds(path, fewer)
    with pytest.raises(FoldsError, match="does not match"):
        write_folds(fewer, tmp_path / "folds", 3)


def test_fold_split_validates_on_its_fold_and_trains_on_the_others_plus_pseudo_rows(split, tmp_path):
    train, _ = split
    path = write_folds(train, tmp_path / "folds", 4)
    folds = read(path)
    extra = tmp_path / "pseudo.csv"
    pd.DataFrame({"id": ["pseudo-1", "pseudo-2"], "comment_text": ["a", "b"], "lang": ["tr", "es"], "toxic": [1, 0]}).to_csv(extra, index=False)
    tr, va = fold_split(train, path, 2, tmp_path / "f2", extra)
    assert list(read(va)["id"]) == list(folds["id"][folds["fold"] == "2"])
    assert list(read(tr)["id"]) == list(folds["id"][folds["fold"] != "2"]) + ["pseudo-1", "pseudo-2"]
    clash = tmp_path / "clash.csv"
    read(train).iloc[:1].to_csv(clash, index=False)
    with pytest.raises(FoldsError, match="shares id"):
        fold_split(train, path, 0, tmp_path / "f0", clash)


@pytest.mark.parametrize("folds, fold, pseudo, message", [
    (5, -1, "", r"fold=-1 with folds=5: pass fold=i for i in 0..4"),
    (5, 5, "", r"fold=5 with folds=5"),
    (1, 0, "", r"folds=1: K folds need K >= 2"),
    (0, 2, "", r"fold=2 without folds"),
    (0, -1, "p.csv", r"pseudo_csv='p.csv' without folds"),
    (3, 0, "/no/such.csv", r"no such file"),
])
def test_fold_parameters_that_name_no_fold_are_refused(folds, fold, pseudo, message):
    with pytest.raises(FoldsError, match=message):
        check_fold_parameters(folds, fold, pseudo)
    check_fold_parameters(0, -1, "")
    check_fold_parameters(3, 2, "")


def test_oof_check_refuses_a_duplicate_a_missing_and_a_wrong_fold():
    folds = pd.DataFrame({"id": ["a", "b", "c", "d"], "fold": [0, 0, 1, 1]})
    good = pd.DataFrame({"id": ["a", "b", "c", "d"], "fold": [0, 0, 1, 1], "pred": 0.5})
    cv.check_oof(good, folds, "g")
    with pytest.raises(infer.GroupError, match=r"1 id\(s\) predicted more than once: 'b'"):
        cv.check_oof(pd.concat([good, good.iloc[[1]]]), folds, "g")
    with pytest.raises(infer.GroupError, match=r"1 training id\(s\) with no out-of-fold prediction: 'd'"):
        cv.check_oof(good.iloc[:3], folds, "g")
    with pytest.raises(infer.GroupError, match=r"another fold's model than their own: 'c'"):
        cv.check_oof(good.assign(fold=[0, 0, 0, 1]), folds, "g")
    with pytest.raises(infer.GroupError, match=r"no training row: 'z'"):
        cv.check_oof(pd.concat([good, pd.DataFrame({"id": ["z"], "fold": [1], "pred": [0.1]})]), folds, "g")


def _fake_group(tmp_path, split, k=3, seed=0) -> tuple[Path, list[np.ndarray], pd.DataFrame]:
    """A group folder as the training notebook leaves it (histories with fold tags, out-of-fold and
    held-out predictions), with random predictions: what the report reads, without training."""
    train, holdout = split
    group = tmp_path / "cv"
    folds_csv = write_folds(train, group / cv.FOLDS_DIR, k)
    folds, rows, held = read(folds_csv), read(train), read(holdout)
    rng = np.random.default_rng(seed)
    preds = []
    for i in range(k):
        m = group / f"fold-{i}"
        m.mkdir()
        (m / "config.json").write_text("{}")
        (m / "train_history.json").write_text(json.dumps({"tags": cv.fold_tags(folds_csv, i), "run_id": f"r{i}"}))
        p = rng.random(len(held))
        preds.append(p)
        pd.DataFrame({"id": held["id"][::-1], "toxic": p[::-1]}).to_csv(m / cv.HELDOUT_PREDICTIONS_FILE, index=False)
        mine = rows[(folds["fold"] == str(i)).to_numpy()]
        pd.DataFrame({"id": mine["id"], "toxic": rng.random(len(mine))}).to_csv(m / "valid_predictions.csv", index=False)
        va = m / "valid.csv"
        mine.to_csv(va, index=False)
        cv.save_oof(m, va)
    (group / "fold-0" / "heldout_scores.json").write_text(json.dumps({"csv": str(holdout)}))
    return group, preds, held


def test_the_blend_of_fold_predictions_is_their_mean_and_oof_covers_every_row(split, tmp_path):
    group, preds, held = _fake_group(tmp_path, split)
    r = cv.report(group)
    mean = np.mean(preds, axis=0)
    blended = read(group / cv.HELDOUT_BLEND_FILE)
    got = blended.set_index("id")["toxic"].astype(float).reindex(held["id"]).to_numpy()
    np.testing.assert_allclose(got, mean, rtol=1e-8)
    labels, langs = held["toxic"].astype(float).to_numpy(), held["lang"].to_numpy()
    assert r["blend"]["all"] == pytest.approx(roc_auc(labels, mean))
    assert r["blend"]["tr"] == pytest.approx(roc_auc(labels[langs == "tr"], mean[langs == "tr"]))
    for member, p in zip(r["members"], preds):
        assert member["heldout"]["all"] == pytest.approx(roc_auc(labels, p))
    oof = read(group / cv.OOF_FILE)
    assert sorted(oof["id"]) == sorted(read(split[0])["id"]) and r["oof"]["rows"] == len(oof)
    assert set(r["oof"]) >= {"all", "en", "tr", "es", "it"}
    text = cv.format_report(r)
    assert "out-of-fold ROC AUC (2799 training rows" in text and f"{r['blend']['all']:.4f}" in text
    ranked = cv.report(group, blend="rank")
    ranks = np.mean([pd.Series(p).rank().to_numpy() / len(p) for p in preds], axis=0)
    got = read(group / cv.HELDOUT_BLEND_FILE).set_index("id")["toxic"].astype(float).reindex(held["id"]).to_numpy()
    np.testing.assert_allclose(got, ranks, rtol=1e-8)  # the rank mean (as written: 9 digits, so equal sums tie)
    assert ranked["blend"]["all"] == pytest.approx(roc_auc(labels, got)) != pytest.approx(r["blend"]["all"])


def test_a_group_with_a_fold_missing_or_an_oof_row_twice_is_refused(split, tmp_path):
    group, _, _ = _fake_group(tmp_path, split)
    extra = read(group / "fold-1" / cv.OOF_FILE)
    pd.concat([read(group / "fold-0" / cv.OOF_FILE), extra.iloc[:2].assign(fold="0")]).to_csv(group / "fold-0" / cv.OOF_FILE, index=False)
    with pytest.raises(infer.GroupError, match=r"2 id\(s\) predicted more than once"):
        cv.report(group)
    import shutil

    shutil.rmtree(group / "fold-2")
    with pytest.raises(infer.GroupError, match=r"folds \[0, 1\] of \[3\], not 0..2 each once"):
        infer.resolve_members(str(group))


def test_resolve_members_gives_every_checkpoint_of_a_group_folder(split, tmp_path):
    group, _, _ = _fake_group(tmp_path, split)
    assert infer.resolve_members(str(group)) == [group / f"fold-{i}" for i in range(3)]
    assert infer.member_labels([tmp_path / "s0" / "artifacts" / "x", tmp_path / "s1" / "artifacts" / "x"]) == \
        ["s0-artifacts-x", "s1-artifacts-x"]


def test_auto_blends_every_kit_trained_checkpoint_attached(split, tmp_path):
    """On Kaggle (kaggle_kit run --folds K): the fold kernels' outputs under /kaggle/input, no checkpoint
    in the working folder: model="auto" gives every one of them, and refuses a run with a fold missing."""
    group, _, _ = _fake_group(tmp_path, split)
    kw = dict(data_dir=SAMPLE, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "working" / "artifacts" / "xlmr-toxic")
    assert infer.resolve_members("auto", search_dir=group, **kw) == [group / f"fold-{i}" for i in range(3)]
    (group / "fold-1" / "train_history.json").unlink()
    with pytest.raises(infer.GroupError, match=r"folds \[0, 2\] of \[3\]"):
        infer.resolve_members("auto", search_dir=group, **kw)


def test_pseudo_labels_are_the_rows_every_member_agrees_on(tmp_path):
    from kitlib.cv.pseudo import write_pseudo

    test_csv, _ = write_slice(tmp_path, 6)
    ids = read(test_csv)["id"]
    a = pd.DataFrame({"id": ids, "toxic": [0.95, 0.95, 0.05, 0.05, 0.5, 0.99]})
    b = pd.DataFrame({"id": ids, "toxic": [0.91, 0.5, 0.02, 0.2, 0.5, 0.92]})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.iloc[::-1].to_csv(tmp_path / "b.csv", index=False)  # another row order: aligned by id
    s = write_pseudo([tmp_path / "a.csv", tmp_path / "b.csv"], test_csv, tmp_path / "p.csv", high=0.9, low=0.1)
    got = read(tmp_path / "p.csv")
    assert list(got["id"]) == ["pseudo-" + ids[i] for i in (0, 2, 5)]
    assert list(got["toxic"]) == ["1", "0", "1"] and list(got.columns) == ["id", "comment_text", "lang", "toxic"]
    assert s["rows"] == 3 and s["positives"] == 2 and s["test_rows"] == 6
    with pytest.raises(ValueError, match="nothing to pseudo-label"):
        write_pseudo([tmp_path / "a.csv", tmp_path / "b.csv"], test_csv, tmp_path / "q.csv", high=0.999, low=0.001)


@pytest.mark.slow
def test_two_folds_of_the_tiny_model_end_to_end(sharp_checkpoint, split, tmp_path):
    """Two folds of the tiny model trained through kitlib on a small stratified slice: out-of-fold
    predictions for every row, held-out predictions of each fold, the report, and the test blend
    through the inference path equal to the mean of the two members' predictions."""
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    train_csv, holdout_csv = split
    rows = read(train_csv)
    small = pd.concat([rows[rows["lang"] == "en"].iloc[:120], rows[rows["lang"] != "en"].iloc[:120]])
    small_csv, held_csv = tmp_path / "train.csv", tmp_path / "held.csv"
    small.to_csv(small_csv, index=False)
    read(holdout_csv).iloc[:96].to_csv(held_csv, index=False)
    test_csv, sample_csv = write_slice(tmp_path / "test", 48)
    group, rt = tmp_path / "cv", detect_runtime(1, "cpu")
    folds_csv = write_folds(small_csv, group / cv.FOLDS_DIR, 2)
    for i in range(2):
        tr, va = fold_split(small_csv, folds_csv, i, tmp_path / f"split-{i}")
        out = group / f"fold-{i}"
        # from the widely spread tiny model at a low rate: predictions that differ per row (the notebook
        # refuses a submission that barely varies on data that is not the bundled sample)
        history = train(TrainJob(checkpoint=str(sharp_checkpoint), train_csv=str(tr), valid_csv=str(va), out_dir=str(out),
                                 epochs=1, batch_size=16, max_len=32, lr=1e-5, recipe="tiny", precision="fp32", save_every_minutes=0,
                                 tags=cv.fold_tags(folds_csv, i)), rt)
        assert history["tags"] == {"cv": cv.group_id(folds_csv), "fold": i, "folds": 2}
        cv.save_oof(out, va)
        predict(InferJob(checkpoint=str(out), test_csv=str(held_csv), shard_dir=str(tmp_path / "shards"),
                         output_csv=str(out / cv.HELDOUT_PREDICTIONS_FILE), batch_size=32, max_len=32, precision="fp32"), rt)
    r = cv.report(group, heldout_csv=held_csv)
    assert r["oof"]["rows"] == len(small) and [m["label"] for m in r["members"]] == ["fold-0", "fold-1"]
    assert 0 <= r["blend"]["all"] <= 1
    job = InferJob(checkpoint="", test_csv=str(test_csv), shard_dir=str(tmp_path / "shards"), output_csv=str(tmp_path / "sub.csv"),
                   sample_submission=str(sample_csv), batch_size=32, max_len=32, precision="fp32")
    result = infer.predict_members(job, infer.resolve_members(str(group)), rt, pred_dir=tmp_path / "members")
    members = [read(tmp_path / "members" / f"fold-{i}.csv").set_index("id")["toxic"].astype(float) for i in range(2)]
    sub = read(result.output).set_index("id")["toxic"].astype(float)
    assert list(sub.index) == list(read(sample_csv)["id"])
    np.testing.assert_allclose(sub.to_numpy(), ((members[0] + members[1]) / 2).reindex(sub.index).to_numpy(), rtol=1e-6)
    assert not np.allclose(members[0].to_numpy(), members[1].reindex(members[0].index).to_numpy())  # two models
    runs = read(group / "runs.csv")
    assert list(runs["oof_auc"].astype(float).round(6)) == [round(r["oof"]["all"], 6)] * 2
    # the inference notebook, given the group folder, blends the same two members into the same submission
    import papermill as pm

    root = Path(__file__).resolve().parents[1]
    pm.execute_notebook(str(root / "notebooks" / "xla_multicore_inference.ipynb"), str(tmp_path / "executed.ipynb"),
                        cwd=str(root / "notebooks"), kernel_name="python3", progress_bar=False,
                        parameters=dict(model=str(group), test_csv=str(test_csv), sample_submission=str(sample_csv),
                                        output_csv=str(tmp_path / "nb.csv"), num_devices=1, batch_size=32,
                                        max_len=32, precision="fp32", cache_dir=str(tmp_path / "cache")))
    nb = read(tmp_path / "nb.csv").set_index("id")["toxic"].astype(float)
    np.testing.assert_allclose(nb.to_numpy(), sub.reindex(nb.index).to_numpy(), rtol=1e-6)


def _reposts(tmp_path, n_texts=120, copies=3, seed=0) -> Path:
    """Issue 33 item 4's small input: 120 texts, each posted 3 times under different ids (360 rows; every
    fourth text toxic; languages en/tr/es), in shuffled order."""
    rng = np.random.default_rng(seed)
    rows = [{"id": f"r{t}-{c}", "comment_text": f"text number {t}", "lang": ["en", "tr", "es"][t % 3],
             "toxic": int(t % 4 == 0)} for t in range(n_texts) for c in range(copies)]
    frame = pd.DataFrame(rows).iloc[rng.permutation(len(rows))]
    path = tmp_path / "reposts.csv"
    frame.to_csv(path, index=False)
    return path


def _leaked(train_csv, folds_csv) -> int:
    """Validation rows of fold i whose text is among fold i's training rows, summed over the folds."""
    rows, folds = read(train_csv), read(folds_csv)
    f = folds.set_index("id")["fold"].reindex(rows["id"]).to_numpy()
    return sum(int(rows["comment_text"][f == i].isin(set(rows["comment_text"][f != i])).sum()) for i in np.unique(f))


def test_repeated_texts_are_one_group_in_one_fold(tmp_path):
    """Issue 33 item 4: rows with the same text under different ids are in one fold, so no validation
    row of fold i has its text among fold i's training rows (StratifiedKFold leaked most of them)."""
    train = _reposts(tmp_path)
    path = write_folds(train, tmp_path / "folds", 5, seed=0)
    assert _leaked(train, path) == 0
    f = read(path)["fold"].astype(int)
    assert sorted(f.value_counts()) == [72] * 5  # 24 texts x 3 copies per fold
    rows = read(train).assign(fold=f.to_numpy())
    assert (rows.groupby("fold")["toxic"].apply(lambda s: (s == "1").sum()) == 18).all()  # 6 toxic texts per fold
    meta = json.loads((path.parent / "folds.json").read_text())
    assert meta["rule_version"] == 2 and "StratifiedGroupKFold" in meta["rule"]
    assert meta["notes"] == ["360 row(s) share their text with another row (120 text(s)): each text's rows are in one fold"]
    assert write_folds(train, tmp_path / "again", 5, seed=0).read_bytes() == path.read_bytes()  # reproducible


def test_a_small_stratum_is_named_and_an_old_rule_folds_file_is_rewritten(tmp_path, capsys):
    train = _reposts(tmp_path)
    rows = read(train)
    rows.loc[rows["comment_text"].isin(["text number 3", "text number 6"]), "lang"] = "it"  # 6 rows of 0|it
    rows.loc[rows["comment_text"] == "text number 4", "lang"] = "it"  # 3 rows of 1|it
    rows.to_csv(train, index=False)
    path = write_folds(train, tmp_path / "folds", 5)
    assert json.loads((path.parent / "folds.json").read_text())["notes"][:3] == [
        "stratum 1|it (label|lang): 3 row(s), fewer than 5 folds: its rows are stratified by label alone",
        "stratum 0|it: 6 row(s) in 2 text(s), fewer than 5 folds: 3 fold(s) get none of it",
        "stratum 1: 3 row(s) in 1 text(s), fewer than 5 folds: 4 fold(s) get none of it"]
    assert "note: folds of" in capsys.readouterr().out
    meta = json.loads((path.parent / "folds.json").read_text())
    meta.pop("rule_version")  # as version 1 wrote it
    (path.parent / "folds.json").write_text(json.dumps(meta))
    with pytest.raises(FoldsError, match=r"made by folds rule version 1, not 2 .*delete"):
        read_folds(path, train)
    write_folds(train, tmp_path / "folds", 5)
    assert "was made by folds rule version 1" in capsys.readouterr().out
    assert json.loads((path.parent / "folds.json").read_text())["rule_version"] == 2


def _cv_script(monkeypatch, root: Path):
    """scripts/cv.py as a module, its ROOT (outputs/, artifacts/predictions/) under ``root``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cv_script", Path(__file__).resolve().parents[1] / "scripts" / "cv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "ROOT", root)
    return mod


class FakeNotebooks:
    """Stands for papermill in scripts/cv.py: the training notebook writes a member folder as the real one
    tags it (fold tags from the folds file and pseudo_csv; config with the epochs and seed asked for); the
    inference notebook resolves its ``model`` as the real one does and writes each member's predictions."""

    def __init__(self, root: Path):
        self.root, self.trained, self.blended = root, [], []

    def __call__(self, python, notebook, out, params):
        import uuid

        p = {params[i + 1]: params[i + 2] for i in range(0, len(params) - 2, 3) if params[i] == "-p"}
        if notebook == "xla_multicore_inference.ipynb":
            members = infer.resolve_members(p["model"])
            self.blended.append([m.name for m in members])
            preds = self.root / "artifacts" / "predictions" / Path(p["output_csv"]).stem
            preds.mkdir(parents=True, exist_ok=True)
            for label in infer.member_labels(members):
                pd.DataFrame({"id": ["t0"], "toxic": [0.5]}).to_csv(preds / f"{label}.csv", index=False)
            return
        tags = {}
        if "folds" in p:
            group, k, i = Path(p["output_dir"]), int(p["folds"]), int(p["fold"])
            folds_csv = group / cv.FOLDS_DIR / "folds.csv"
            if not folds_csv.is_file():
                folds_csv.parent.mkdir(parents=True)
                pd.DataFrame({"id": list("abcdef"), "fold": [j % k for j in range(6)]}).to_csv(folds_csv, index=False)
                (folds_csv.parent / "folds.json").write_text(json.dumps({"folds": k, "rule_version": 2}))
            member, tags = group / f"fold-{i}", cv.fold_tags(folds_csv, i, p.get("pseudo_csv") or None)
        else:
            member = Path(p["output_dir"])
        member.mkdir(parents=True, exist_ok=True)
        (member / "config.json").write_text("{}")
        (member / "train_history.json").write_text(json.dumps({"tags": tags, "run_id": uuid.uuid4().hex, "config": {
            "epochs": int(p.get("epochs", 1)), "seed": int(p.get("seed", 0))}}))
        for name in (cv.HELDOUT_PREDICTIONS_FILE, cv.OOF_FILE):
            (member / name).write_text("id,toxic\n")
        self.trained.append(member.name)


@pytest.fixture
def fake_cv(monkeypatch, tmp_path):
    """scripts/cv.py with FakeNotebooks and a report that lists the members it blends."""
    mod = _cv_script(monkeypatch, tmp_path)
    fake = FakeNotebooks(tmp_path)
    monkeypatch.setattr(mod, "_papermill", fake)
    monkeypatch.setattr(cv, "report", lambda group, **kw: {"members": [{"label": m.name} for m in infer.members_of(group)],
                                                            "blend": {"all": 0.5}})
    monkeypatch.setattr(cv, "format_report", lambda r: "")
    return mod, fake


def _args(**kw):
    import argparse

    base = dict(folds=0, seeds=None, reuse=False, params=["-p", "epochs", "1"], python="python", blend="mean", single=None)
    return argparse.Namespace(**{**base, **kw})


def test_a_seed_group_is_the_seeds_asked_for_not_the_folders_left(fake_cv, tmp_path, capsys):
    """Issue 33 item 5: `make cv SEEDS="0 1"` after a 3-seed run blends 2 members and says so."""
    mod, fake = fake_cv
    group = tmp_path / "seeds"
    mod.run_round(_args(seeds=[0, 1, 2]), group, tmp_path / "sub.csv", [])
    r = mod.run_round(_args(seeds=[0, 1]), group, tmp_path / "sub.csv", [])
    assert fake.blended[-1] == ["seed-0", "seed-1"] and [m["label"] for m in r["members"]] == ["seed-0", "seed-1"]
    assert [m.name for m in infer.resolve_members(str(group))] == ["seed-0", "seed-1"]
    out = capsys.readouterr().out
    assert "2 member(s), seed-0, seed-1; not members (not asked for this time): seed-2" in out
    assert "blended submission (2 members)" in out


def test_the_pseudo_round_takes_this_rounds_members_by_name(fake_cv, tmp_path, monkeypatch):
    """Issue 33 item 5: the pseudo-labels come from this 3-fold run's fold-0..2, not an earlier 5-fold
    run's fold-3.csv and fold-4.csv left in the predictions folder."""
    import kitlib.cv.pseudo

    mod, fake = fake_cv
    preds = tmp_path / "artifacts" / "predictions" / "sub"
    preds.mkdir(parents=True)
    for i in (3, 4):
        pd.DataFrame({"id": ["t0"], "toxic": [0.99]}).to_csv(preds / f"fold-{i}.csv", index=False)
    used = []

    def write_pseudo(member_csvs, test, out, **kw):
        used.append([Path(m).name for m in member_csvs])
        Path(out).write_text("id,comment_text,lang,toxic\n")
        return {"summary": "stub"}

    monkeypatch.setattr(kitlib.cv.pseudo, "write_pseudo", write_pseudo)
    rc = mod.main(["--folds", "3", "--pseudo", "--group", str(tmp_path / "cv"), "--submission", str(tmp_path / "sub.csv"),
                   "--test", str(SAMPLE / "test.csv"), "--", "-p", "split", "validation"])
    assert rc == 0 and used == [["fold-0.csv", "fold-1.csv", "fold-2.csv"]]
    assert fake.blended == [["fold-0", "fold-1", "fold-2"]] * 2


def test_reuse_is_decided_by_what_a_member_was_trained_on(fake_cv, tmp_path):
    """Issue 33 item 5: CV_REUSE=1 with new pseudo-labels (or other parameters) trains every fold again;
    with the same inputs it reuses them."""
    mod, fake = fake_cv
    group, pseudo = tmp_path / "cv-pseudo", tmp_path / "pseudo.csv"
    pseudo.write_text("id,comment_text,lang,toxic\npseudo-1,a,tr,1\n")
    extra = ["-p", "pseudo_csv", str(pseudo)]
    mod.run_round(_args(folds=3, reuse=True), group, tmp_path / "sub.csv", extra)
    assert fake.trained == ["fold-0", "fold-1", "fold-2"]
    mod.run_round(_args(folds=3, reuse=True), group, tmp_path / "sub.csv", extra)
    assert len(fake.trained) == 3  # the same inputs: reused
    pseudo.write_text("id,comment_text,lang,toxic\npseudo-2,b,es,0\n")  # new pseudo-labels, same path
    mod.run_round(_args(folds=3, reuse=True), group, tmp_path / "sub.csv", extra)
    assert fake.trained[3:] == ["fold-0", "fold-1", "fold-2"]
    mod.run_round(_args(folds=3, reuse=True, params=["-p", "epochs", "2"]), group, tmp_path / "sub.csv", extra)
    assert fake.trained[6:] == ["fold-0", "fold-1", "fold-2"]


def test_a_group_trained_two_ways_is_refused(split, tmp_path):
    group, _, _ = _fake_group(tmp_path, split)
    for i, epochs in enumerate((1, 1, 2)):
        h = tmp_path / "cv" / f"fold-{i}" / "train_history.json"
        h.write_text(json.dumps({**json.loads(h.read_text()), "config": {"epochs": epochs, "lr": 2e-5, "seed": 0}}))
    with pytest.raises(infer.GroupError, match=r"trained two ways \(epochs: 1 \(fold-0, fold-1\); 2 \(fold-2\)\)"):
        infer.resolve_members(str(group))


def test_the_single_model_is_compared_on_the_groups_held_out_rows(split, tmp_path):
    """Issue 33 item 5: the report's single-model figure is its AUC on the blend's held-out rows, not the
    one its heldout_scores.json gives for other rows."""
    group, _, held = _fake_group(tmp_path, split)
    single = tmp_path / "single"
    single.mkdir()
    (single / "heldout_scores.json").write_text(json.dumps({"roc_auc": 0.99, "per_language": {}}))  # other rows
    p = np.random.default_rng(5).random(len(held))
    extra = pd.DataFrame({"id": ["other-1"], "toxic": [0.3]})
    pd.concat([pd.DataFrame({"id": held["id"], "toxic": p}), extra]).to_csv(single / cv.HELDOUT_PREDICTIONS_FILE, index=False)
    r = cv.report(group, single=single)
    labels = held["toxic"].astype(float).to_numpy()
    assert r["single"]["all"] == pytest.approx(roc_auc(labels, p)) and r["single"]["rows"] == len(held) == 500
    pd.DataFrame({"id": held["id"][:96], "toxic": p[:96]}).to_csv(single / cv.HELDOUT_PREDICTIONS_FILE, index=False)
    r = cv.report(group, single=single)
    assert r["single"] is None and "lack 404 of the group's 500 held-out rows" in r["single_note"]
    assert "not the same rows, not compared" in cv.format_report(r)


def test_pseudo_labels_that_cannot_join_the_split_are_refused_before_the_first_fold(fake_cv, tmp_path, capsys):
    """Issue 33 item 8: under the default split="english" (train.csv's columns) make cv PSEUDO=1 stops
    before training any fold, not after every first-round fold trained."""
    mod, fake = fake_cv
    rc = mod.main(["--folds", "3", "--pseudo", "--group", str(tmp_path / "cv"), "--submission", str(tmp_path / "sub.csv"),
                   "--test", str(SAMPLE / "test.csv"), "--", "-p", "data_dir", str(SAMPLE)])
    assert rc == 2 and fake.trained == []
    assert "no column(s) severe_toxic, obscene, threat, insult, identity_hate" in capsys.readouterr().err


def test_a_pseudo_csv_under_home_is_found(tmp_path, monkeypatch):
    """Issue 33 item 8: pseudo_csv="~/..." is expanded (kitlib.storage.normalise), not refused as missing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.csv").write_text("id,comment_text,lang,toxic\n")
    assert check_fold_parameters(3, 0, "~/p.csv") == str(tmp_path / "p.csv")


def test_auto_refuses_one_fold_of_three_as_it_refuses_two(split, tmp_path):
    """Issue 34.3: with 1 of 3 fold kernels attached, model="auto" predicted with fold 0 alone, silently."""
    import shutil

    group, _, _ = _fake_group(tmp_path, split)
    kw = dict(data_dir=SAMPLE, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "working" / "artifacts" / "xlmr-toxic")
    shutil.rmtree(group / "fold-1")
    shutil.rmtree(group / "fold-2")
    with pytest.raises(infer.GroupError, match=r"folds \[0\] of \[3\], not 0..2 each once \(fold 0: .*fold-0\); "
                                            r"attach or train every fold"):
        infer.resolve_members("auto", search_dir=group, **kw)


def test_make_cv_seeds_leaves_the_folds_blend_alone(tmp_path, monkeypatch, capsys):
    """Issue 34.3: make cv SEEDS=... blended into submission-cv.csv, replacing the folds' blend without a word."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cv_script", Path(__file__).resolve().parents[1] / "scripts" / "cv.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "ROOT", tmp_path)
    (tmp_path / "submission-cv.csv").write_text("id,toxic\n1,0.5\n")  # the folds' blend
    seen = []
    monkeypatch.setattr(script, "run_round", lambda args, group, submission, extra, compare=None: seen.append((group, submission)) or {})
    assert script.main(["--seeds", "0,1", "--python", "python"]) == 0
    assert seen == [(tmp_path / "artifacts" / "seeds", tmp_path / "submission-seeds.csv")]
    assert ("note: the seeds blend goes to submission-seeds.csv; submission-cv.csv (the folds' blend) is left as it is "
            "(--submission FILE to choose)") in capsys.readouterr().out
    assert (tmp_path / "submission-cv.csv").read_text() == "id,toxic\n1,0.5\n"
    assert script.main(["--folds", "3", "--python", "python"]) == 0
    assert seen[-1] == (tmp_path / "artifacts" / "cv", tmp_path / "submission-cv.csv")
