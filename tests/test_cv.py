"""Folds, out-of-fold predictions, group blends and pseudo-labels (kitlib/cv/folds.py, kitlib/cv/groups.py, kitlib/cv/pseudo.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

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
    with pytest.raises(cv.GroupError, match=r"1 id\(s\) predicted more than once: 'b'"):
        cv.check_oof(pd.concat([good, good.iloc[[1]]]), folds, "g")
    with pytest.raises(cv.GroupError, match=r"1 training id\(s\) with no out-of-fold prediction: 'd'"):
        cv.check_oof(good.iloc[:3], folds, "g")
    with pytest.raises(cv.GroupError, match=r"another fold's model than their own: 'c'"):
        cv.check_oof(good.assign(fold=[0, 0, 0, 1]), folds, "g")
    with pytest.raises(cv.GroupError, match=r"no training row: 'z'"):
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
    with pytest.raises(cv.GroupError, match=r"2 id\(s\) predicted more than once"):
        cv.report(group)
    import shutil

    shutil.rmtree(group / "fold-2")
    with pytest.raises(cv.GroupError, match=r"folds \[0, 1\] of \[3\], not 0..2 each once"):
        cv.resolve_members(str(group))


def test_resolve_members_gives_every_checkpoint_of_a_group_folder(split, tmp_path):
    group, _, _ = _fake_group(tmp_path, split)
    assert cv.resolve_members(str(group)) == [group / f"fold-{i}" for i in range(3)]
    assert cv.member_labels([tmp_path / "s0" / "artifacts" / "x", tmp_path / "s1" / "artifacts" / "x"]) == \
        ["s0-artifacts-x", "s1-artifacts-x"]


def test_auto_blends_every_kit_trained_checkpoint_attached(split, tmp_path):
    """On Kaggle (kaggle_kit run --folds K): the fold kernels' outputs under /kaggle/input, no checkpoint
    in the working folder: model="auto" gives every one of them, and refuses a run with a fold missing."""
    group, _, _ = _fake_group(tmp_path, split)
    kw = dict(data_dir=SAMPLE, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "working" / "artifacts" / "xlmr-toxic")
    assert cv.resolve_members("auto", search_dir=group, **kw) == [group / f"fold-{i}" for i in range(3)]
    (group / "fold-1" / "train_history.json").unlink()
    with pytest.raises(cv.GroupError, match=r"folds \[0, 2\] of \[3\]"):
        cv.resolve_members("auto", search_dir=group, **kw)


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
    from kitlib.training.train import TrainJob, train

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
    result = cv.predict_members(job, cv.resolve_members(str(group)), rt, pred_dir=tmp_path / "members")
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


def test_auto_refuses_one_fold_of_three_as_it_refuses_two(split, tmp_path):
    """Issue 34.3: with 1 of 3 fold kernels attached, model="auto" predicted with fold 0 alone, silently."""
    import shutil

    group, _, _ = _fake_group(tmp_path, split)
    kw = dict(data_dir=SAMPLE, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "working" / "artifacts" / "xlmr-toxic")
    shutil.rmtree(group / "fold-1")
    shutil.rmtree(group / "fold-2")
    with pytest.raises(cv.GroupError, match=r"folds \[0\] of \[3\], not 0..2 each once \(fold 0: .*fold-0\); "
                                            r"attach or train every fold"):
        cv.resolve_members("auto", search_dir=group, **kw)


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
