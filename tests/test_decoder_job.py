"""``make decoder``'s comparison (scripts/decoder.py): e5, the decoder (Gemma 3 270M or SmolLM2), their rank blend and the cascade on the same
held-out rows, overall and per language, each figure against one computed here by hand."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import decoder  # noqa: E402


def _folder(path, csv, ids, pred):
    path.mkdir()
    pd.DataFrame({"id": ids, "toxic": pred}).to_csv(path / "heldout_predictions.csv", index=False)
    (path / "heldout_scores.json").write_text(json.dumps({"csv": str(csv), "roc_auc": 0.5}))
    return path


@pytest.fixture
def heldout(tmp_path):
    rng = np.random.default_rng(0)
    n = 60
    ids = [f"r{i:02d}" for i in range(n)]
    label = np.r_[np.ones(12), np.zeros(n - 12)].astype(int)
    rng.shuffle(label)
    lang = np.array(["es", "it", "tr"] * (n // 3))
    csv = tmp_path / "heldout.csv"
    pd.DataFrame({"id": ids, "comment_text": "x", "lang": lang, "toxic": label}).to_csv(csv, index=False)
    a = np.clip(0.3 * label + rng.normal(0.4, 0.2, n), 0.001, 0.999)  # an encoder's probabilities
    b = 4.0 * label + rng.normal(0, 3.0, n)  # a decoder's score, another scale
    return csv, ids, label, lang, a, b


def test_compare_scores_each_model_the_blend_and_the_cascade_by_hand(heldout, tmp_path):
    csv, ids, label, lang, a, b = heldout
    order = np.random.default_rng(1).permutation(len(ids))  # the decoder's file in another row order
    A = _folder(tmp_path / "e5", csv, ids, a)
    B = _folder(tmp_path / "smol", csv, [ids[i] for i in order], b[order])
    r = decoder.compare(A, B, fraction=0.25)
    m = r["models"]
    assert r["rows"] == 60 and set(m) == {"encoder", "decoder", "rank blend", "cascade"}
    assert m["encoder"]["all"] == pytest.approx(roc_auc_score(label, a))
    assert m["decoder"]["all"] == pytest.approx(roc_auc_score(label, b))
    for k in ("es", "it", "tr"):
        assert m["decoder"][k] == pytest.approx(roc_auc_score(label[lang == k], b[lang == k]))
    blend = (rankdata(a) + rankdata(b)) / 2
    assert m["rank blend"]["all"] == pytest.approx(roc_auc_score(label, blend))
    # the cascade: e5's 15 rows nearest the quantile 1 - share(a > 0.5), by rank; their e5 values handed out in b's order
    center = 1 - (a > 0.5).mean()
    assert r["center"] == pytest.approx(center)
    picked = np.sort(np.argsort(np.abs(rankdata(a) / len(a) - center), kind="stable")[:15])
    want = a.copy()
    want[picked[np.argsort(b[picked], kind="stable")]] = np.sort(a[picked])
    assert m["cascade"]["all"] == pytest.approx(roc_auc_score(label, want))
    assert m["cascade"]["all"] != pytest.approx(m["encoder"]["all"])  # the re-ordered rows moved the figure
    assert "rank blend" in decoder.format_table(r) and "tr" in decoder.format_table(r).splitlines()[0]
    assert decoder.format_table({**r, "decoder_model": "gemma3-270m"}).endswith("re-ordered by gemma3-270m)")
    assert set(r["gain_95"]) == {"decoder", "rank blend", "cascade"}
    low, high = r["gain_95"]["decoder"]
    assert low < m["decoder"]["all"] - m["encoder"]["all"] < high
    assert "vs e5" in decoder.format_table(r).splitlines()[2] and "vs e5" not in decoder.format_table(r).splitlines()[1]


def test_the_gain_interval_is_a_paired_bootstrap_of_the_auc_difference():
    """kitlib.metrics.auc_gain_interval: 0 for the same scores, above 0 for a better model, seeded, checked against
    a bootstrap written here with sklearn's roc_auc_score, and refusing rows that do not pair."""
    from kitlib.metrics import auc_gain_interval

    rng = np.random.default_rng(3)
    y = (rng.random(300) < 0.2).astype(int)
    weak = np.round(y + rng.normal(0, 1.5, 300), 1)  # ties: counted as half, as roc_auc_score does
    strong = y + rng.normal(0, 0.4, 300)
    assert auc_gain_interval(y, weak, weak) == (0.0, 0.0)
    low, high = auc_gain_interval(y, weak, strong, resamples=300)
    assert 0 < low < roc_auc_score(y, strong) - roc_auc_score(y, weak) < high
    assert auc_gain_interval(y, weak, strong, resamples=300) == (low, high)  # seeded
    draws = np.random.default_rng(0)
    gains = []
    for _ in range(300):
        i = draws.integers(0, 300, 300)
        if 0 < y[i].sum() < 300:
            gains.append(roc_auc_score(y[i], strong[i]) - roc_auc_score(y[i], weak[i]))
    assert (low, high) == pytest.approx(tuple(np.quantile(gains, [0.025, 0.975])))
    with pytest.raises(ValueError, match="300 labels, 300 and 299 scores"):
        auc_gain_interval(y, weak, strong[:-1])
    with pytest.raises(ValueError, match="one class"):
        auc_gain_interval(np.zeros(5), weak[:5], strong[:5])


def test_the_decoder_is_named_by_the_model_parameter():
    assert decoder._model_param(["-p", "model", "gemma3-270m", "-p", "lora_r", "16"]) == "gemma3-270m"
    assert decoder._model_param(["-p", "model", "smollm2-135m", "--parameters", "model", "gemma3-270m"]) == "gemma3-270m"
    assert decoder._model_param(["-p", "lora_r", "16", "-p", "kind", "model"]) is None


def test_compare_refuses_other_rows_or_a_folder_without_held_out_predictions(heldout, tmp_path):
    csv, ids, label, lang, a, b = heldout
    A = _folder(tmp_path / "e5", csv, ids, a)
    fewer = _folder(tmp_path / "fewer", csv, ids[:50], b[:50])
    with pytest.raises(decoder.CompareError, match="different rows"):
        decoder.compare(A, fewer)
    other_csv = tmp_path / "other.csv"
    other_csv.write_text(csv.read_text())
    elsewhere = _folder(tmp_path / "elsewhere", other_csv, ids, b)
    with pytest.raises(decoder.CompareError, match="not the same rows"):
        decoder.compare(A, elsewhere)
    (tmp_path / "empty").mkdir()
    with pytest.raises(decoder.CompareError, match="empty: no heldout_predictions.csv"):
        decoder.compare(A, tmp_path / "empty")


def test_a_refused_decoder_is_still_compared_and_the_command_exits_1(heldout, tmp_path, monkeypatch, capsys):
    """A decoder the hand-off refuses (a collapsed model) is reported whichever way it goes: the table is printed
    from this run's held-out predictions, with a note, and the exit status is 1. The training notebook is stood in
    for by a program that marks the folder refused and fails, as the notebook's hand-off does."""
    csv, ids, label, lang, a, b = heldout
    A = _folder(tmp_path / "e5", csv, ids, a)
    B = _folder(tmp_path / "smol", csv, ids, b)
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho refused > {B}/handoff_refused.json\nexit 1\n")
    fake.chmod(0o755)
    assert decoder.main(["--single", str(A), "--output", str(B), "--python", str(fake)]) == 1
    out = capsys.readouterr().out
    assert "decoder " in out and "rank blend" in out and "note: the hand-off refused the decoder" in out
    assert json.loads((B / "kinds_report.json").read_text())["decoder_refused"] is True
    fake.write_text("#!/bin/sh\nexit 3\n")  # any other failure: its status, nothing compared
    (B / "handoff_refused.json").unlink()
    assert decoder.main(["--single", str(A), "--output", str(B), "--python", str(fake)]) == 3
