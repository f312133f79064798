"""kitlib.cv.splits.english_holdout_split: which rows, how many, stratified, exact strings, refusals."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import SAMPLE
from kitlib.cv.splits import english_holdout_split


def _read(p):
    return pd.read_csv(p, dtype=str, keep_default_na=False)


def test_sample_split_is_stratified_disjoint_and_exact(tmp_path):
    train, hold = english_holdout_split(SAMPLE / "train.csv", tmp_path / "split", frac=0.2, seed=0)
    src, tr, ho = _read(SAMPLE / "train.csv"), _read(train), _read(hold)
    assert (len(tr), len(ho)) == (1839, 460)
    assert set(tr["id"]).isdisjoint(ho["id"]) and set(tr["id"]) | set(ho["id"]) == set(src["id"])
    # stratified: 200 toxic rows in 2,299 -> 40 held out, 160 kept
    assert (ho["toxic"] == "1").sum() == 40 and (tr["toxic"] == "1").sum() == 160
    # every column and every string as in the source (multi-line texts, doubled quotes), file order kept
    assert list(tr.columns) == list(src.columns)
    merged = src.set_index("id").loc[ho["id"]].reset_index()
    pd.testing.assert_frame_equal(ho, merged[src.columns])
    assert ho["id"].tolist() == [i for i in src["id"] if i in set(ho["id"])]
    meta = json.loads((tmp_path / "split" / "split.json").read_text())
    assert meta["holdout_positives"] == 40 and meta["language_rule"].startswith("whole file")


def test_same_seed_same_split_other_seed_other_split(tmp_path):
    a = _read(english_holdout_split(SAMPLE / "train.csv", tmp_path / "a", 0.2, 0)[1])["id"].tolist()
    b = _read(english_holdout_split(SAMPLE / "train.csv", tmp_path / "b", 0.2, 0)[1])["id"].tolist()
    c = _read(english_holdout_split(SAMPLE / "train.csv", tmp_path / "c", 0.2, 1)[1])["id"].tolist()
    assert a == b and a != c
    # rerunning into the same folder replaces it
    again = english_holdout_split(SAMPLE / "train.csv", tmp_path / "a", 0.2, 1)[1]
    assert _read(again)["id"].tolist() == c


def _lang_csv(path, langs, toxic):
    n = len(langs)
    pd.DataFrame({"id": [str(i) for i in range(n)], "comment_text": [f"text {i}" for i in range(n)],
                  "lang": langs, "toxic": toxic}).to_csv(path, index=False)
    return path


def test_lang_column_keeps_only_that_language(tmp_path):
    langs = ["en", "tr"] * 20
    toxic = [0, 0, 0, 0, 1, 1, 1, 1] * 5
    csv = _lang_csv(tmp_path / "mixed.csv", langs, toxic)
    train, hold = english_holdout_split(csv, tmp_path / "split", 0.25, 0, lang_col="lang")
    tr, ho = _read(train), _read(hold)
    assert (len(tr), len(ho)) == (15, 5)
    assert set(tr["lang"]) == set(ho["lang"]) == {"en"}


def test_refusals_name_the_column_and_the_fix(tmp_path):
    csv = _lang_csv(tmp_path / "mixed.csv", ["en", "tr"] * 20, [0, 1] * 20)
    with pytest.raises(ValueError, match=r"mixed\.csv: has a 'lang' column .*lang_col='lang'"):
        english_holdout_split(csv, tmp_path / "s1", 0.2, 0)
    with pytest.raises(ValueError, match=r"train\.csv: no language column 'language' .*lang_col=None"):
        english_holdout_split(SAMPLE / "train.csv", tmp_path / "s2", 0.2, 0, lang_col="language")
    with pytest.raises(ValueError, match=r"no row has lang == 'de'"):
        english_holdout_split(csv, tmp_path / "s3", 0.2, 0, lang_col="lang", lang="de")
    with pytest.raises(ValueError, match=r"missing column 'severe'"):
        english_holdout_split(SAMPLE / "train.csv", tmp_path / "s4", 0.2, 0, label_col="severe")
    with pytest.raises(ValueError, match="frac must be between 0 and 1"):
        english_holdout_split(SAMPLE / "train.csv", tmp_path / "s5", 1.0, 0)
    one_pos = _lang_csv(tmp_path / "onepos.csv", ["en"] * 20, [1] + [0] * 19)
    with pytest.raises(ValueError, match=r"onepos\.csv: 1 distinct text\(s\) with toxic = 1 among 20 rows"):
        english_holdout_split(one_pos, tmp_path / "s6", 0.2, 0, lang_col="lang")
    # nothing was written by any refused call
    assert not any((tmp_path / f"s{i}").exists() for i in range(1, 7))


def test_refuses_to_replace_a_folder_with_other_files(tmp_path):
    out = tmp_path / "working"
    out.mkdir()
    (out / "submission.csv").write_text("id,toxic\n")
    with pytest.raises(ValueError, match=r"working: holds other files \(submission\.csv\)"):
        english_holdout_split(SAMPLE / "train.csv", out, 0.2, 0)
    assert (out / "submission.csv").read_text() == "id,toxic\n" and len(list(out.iterdir())) == 1


# --- validation_split: English rows + the first half of validation.csv train; its second half is held out ---

def test_validation_split_holds_out_the_second_half_never_trained_on(tmp_path):
    from kitlib.cv.splits import validation_split

    train, hold = validation_split(SAMPLE / "train.csv", SAMPLE / "validation.csv", tmp_path / "split")
    src_en, src_va, tr, ho = _read(SAMPLE / "train.csv"), _read(SAMPLE / "validation.csv"), _read(train), _read(hold)
    assert (len(tr), len(ho)) == (2299 + 500, 500)
    assert ho["id"].tolist() == src_va["id"].tolist()[500:]  # rows 500-999, file order
    assert set(ho["id"]).isdisjoint(tr["id"])
    assert tr["id"].tolist() == src_en["id"].tolist() + src_va["id"].tolist()[:500]
    assert list(tr.columns) == list(ho.columns) == ["id", "comment_text", "lang", "toxic"]
    assert set(tr["lang"][:2299]) == {"en"} and ho["lang"].value_counts().to_dict() == {"tr": 179, "es": 168, "it": 153}
    assert ho["comment_text"].tolist() == src_va["comment_text"].tolist()[500:]  # exact strings
    meta = json.loads((tmp_path / "split" / "split.json").read_text())
    assert meta["holdout_positives"] == 88 and "rows 500-999 of validation.csv are held out" in meta["rule"]


def test_validation_split_refuses_shared_ids_and_bad_fractions(tmp_path):
    from kitlib.cv.splits import validation_split

    with pytest.raises(ValueError, match="train_frac must be between 0 and 1"):
        validation_split(SAMPLE / "train.csv", SAMPLE / "validation.csv", tmp_path / "a", train_frac=1.0)
    with pytest.raises(ValueError, match="share id"):
        validation_split(SAMPLE / "validation.csv", SAMPLE / "validation.csv", tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --- issue 34 item 1: split "holdout", a share of the training file of any competition ---


def test_holdout_split_of_an_own_competition_is_stratified_by_label_and_language(tmp_path):
    """Before: no split took its held-out rows from the training file alone (training needed validation.csv)."""
    from support.own_data import write_own_competition

    from kitlib.cv.splits import holdout_split

    data = write_own_competition(tmp_path / "own")
    train, hold = holdout_split(data / "train.csv", tmp_path / "split", frac=0.25, seed=0, label_col="label",
                                text_col="text")
    src, tr, ho = _read(data / "train.csv"), _read(train), _read(hold)
    # 239 texts (one is in two rows): round(0.25 x 239) = 60 texts held out, that text's rows together (issue 39 item 6)
    assert ho["text"].nunique() == 60 and len(ho) + len(tr) == 240 and set(tr["id"]).isdisjoint(ho["id"])
    assert set(tr["text"]).isdisjoint(ho["text"])
    assert list(tr.columns) == list(src.columns)
    for (lang, label), n in src.groupby(["lang", "label"]).size().items():  # every stratum keeps its share
        held = ((ho["lang"] == lang) & (ho["label"] == label)).sum()
        assert abs(held - n / 4) <= 1, (lang, label, held, n)
    meta = json.loads((tmp_path / "split" / "split.json").read_text())
    assert meta["split"] == "holdout" and meta["holdout"]["rows"] == len(ho) and meta["lang_col"] == "lang"
    again = holdout_split(data / "train.csv", tmp_path / "again", frac=0.25, seed=0, label_col="label", text_col="text")
    assert _read(again[1])["id"].tolist() == ho["id"].tolist()  # seeded


def test_auto_split_is_holdout_without_a_validation_file(tmp_path):
    from kitlib.cv.splits import resolve_split

    assert resolve_split("auto", tmp_path / "validation.csv") == "holdout"
    assert resolve_split("auto", SAMPLE / "validation.csv") == "english"
    with pytest.raises(FileNotFoundError, match=r"split='english' needs the validation file .*split='holdout'"):
        resolve_split("english", tmp_path / "validation.csv")
    with pytest.raises(ValueError, match=r"split='holdup': pass one of 'auto', 'english', 'validation', 'holdout'"):
        resolve_split("holdup", SAMPLE / "validation.csv")


# --- issue 39 item 6: every held-out draw keeps one text on one side ---


def _reposted_csv(path, n=60, texts=18):
    """``n`` rows over ``texts`` distinct texts (reposts: row i has text i % texts, its label and language the
    text's), a ``lang`` column of two languages."""
    text = [f"text {i % texts}" for i in range(n)]
    pd.DataFrame({"id": [f"r{i}" for i in range(n)], "comment_text": text,
                  "lang": ["en" if (i % texts) % 2 else "tr" for i in range(n)],
                  "toxic": [int((i % texts) % 3 == 0) for i in range(n)]}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_holdout_and_english_splits_keep_each_repeated_text_on_one_side(tmp_path, seed):
    """Before: both drew rows, so a reposted text was held out and trained on at once (seed 0: all 15 held-out
    rows of holdout_split had their text among the trained rows), and the held-out AUC scored them."""
    from kitlib.cv.splits import holdout_split

    csv = _reposted_csv(tmp_path / "reposts.csv")
    src = _read(csv)
    src.drop(columns="lang").to_csv(tmp_path / "en.csv", index=False)  # the English split's file has no language
    for name, split in (("holdout", lambda out: holdout_split(csv, out, frac=0.25, seed=seed)),
                        ("english", lambda out: english_holdout_split(tmp_path / "en.csv", out, 0.25, seed))):
        tr, ho = (_read(p) for p in split(tmp_path / f"{name}-{seed}"))
        assert set(tr["comment_text"]).isdisjoint(ho["comment_text"]), name  # no held-out text was trained on
        assert sorted(tr["id"].tolist() + ho["id"].tolist()) == sorted(src["id"])  # every row once
        assert ho["comment_text"].nunique() == round(0.25 * 18)  # whole texts: 4 or 5 of 18 (round half to even: 4)
        assert set(ho["toxic"]) == {"0", "1"}  # both classes held out: the AUC is defined
        meta = json.loads((tmp_path / f"{name}-{seed}" / "split.json").read_text())
        assert meta["notes"] == ["60 row(s) share their text with another row (18 text(s)): each text's rows are on one side"]


def test_a_split_without_repeated_texts_draws_the_rows_it_drew_before(tmp_path):
    """The grouping changes nothing where no text repeats: the sample's held-out ids are those the row draw gave
    (sklearn's train_test_split over the rows, stratified, seed 0), so earlier figures still stand."""
    from sklearn.model_selection import train_test_split

    src = _read(SAMPLE / "train.csv")
    hold = _read(english_holdout_split(SAMPLE / "train.csv", tmp_path / "s", 0.2, 0)[1])
    _, ho = train_test_split(list(range(len(src))), test_size=460, stratify=(src["toxic"] == "1").to_numpy(), random_state=0)
    assert hold["id"].tolist() == src["id"].iloc[sorted(ho)].tolist()
    assert json.loads((tmp_path / "s" / "split.json").read_text())["notes"] == []


def test_validation_split_names_held_out_rows_whose_text_was_trained_on(tmp_path):
    """The validation split is file order, so it cannot move a repeat: it names it (before: said nothing)."""
    from kitlib.cv.splits import validation_split

    en = _read(SAMPLE / "train.csv").iloc[:50]
    va = _read(SAMPLE / "validation.csv").iloc[:40]
    va.loc[30, "comment_text"] = en["comment_text"].iloc[7]  # an English row copied into the held-out half
    en.to_csv(tmp_path / "en.csv", index=False)
    va.to_csv(tmp_path / "va.csv", index=False)
    validation_split(tmp_path / "en.csv", tmp_path / "va.csv", tmp_path / "split")
    (note,) = json.loads((tmp_path / "split" / "split.json").read_text())["notes"]
    assert note.startswith(f"1 held-out row(s) share their text with a training row (ids {va['id'].iloc[30]})"), note
