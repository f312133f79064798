"""``make sharded-decoder`` (scripts/sharded_decoder.py): its parent-side pieces here (no JAX), and one short run
of the whole command (8 virtual devices in its child) marked slow."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import sharded_decoder as sd  # noqa: E402


def test_mesh_option():
    assert sd.parse_mesh("2x4") == (2, 4) and sd.parse_mesh("1X8") == (1, 8)
    for bad in ("2x", "3x3", "0x8", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="mesh"):
            sd.parse_mesh(bad)


def test_sample_is_seeded_and_half_toxic():
    train = pd.DataFrame({"id": [str(i) for i in range(100)], "toxic": ["1"] * 10 + ["0"] * 90})
    a, b = sd.sample_rows(train, 16, seed=0), sd.sample_rows(train, 16, seed=0)
    assert list(a["id"]) == list(b["id"]) and a["id"].is_unique and len(a) == 16
    assert (a["toxic"] == "1").sum() == 8  # half toxic though the file is 10% toxic
    assert list(a["id"]) != list(sd.sample_rows(train, 16, seed=1)["id"])
    assert (sd.sample_rows(train, 40)["toxic"] == "1").sum() == 10  # every toxic row there is, then the rest
    with pytest.raises(ValueError, match=r"101 training rows asked of 100 \(10 toxic, 90 not\)"):
        sd.sample_rows(train, 101)
    with pytest.raises(ValueError, match="of both classes"):
        sd.sample_rows(train.iloc[10:], 8)


def test_torch_figures_are_make_decoders_else_the_recorded_ones(tmp_path):
    figures, source = sd.torch_figures(tmp_path / "absent.json")
    assert figures == {"all": 0.6487, "es": 0.6608, "it": 0.6191, "tr": 0.5871} and source.startswith("recorded")
    report = tmp_path / "kinds_report.json"
    report.write_text(json.dumps({"models": {"encoder": {"all": 0.9}, "decoder": {"all": 0.61, "es": 0.6}}}))
    figures, source = sd.torch_figures(report)
    assert figures == {"all": 0.61, "es": 0.6} and source.startswith("measured by make decoder")
    text = sd.format_table({"all": 0.55, "es": 0.5, "it": 0.6, "tr": 0.7}, figures, source, "sharded")
    lines = text.splitlines()
    assert lines[0].split()[-4:] == ["all", "es", "it", "tr"]
    assert lines[1].split()[-4:] == ["0.5500", "0.5000", "0.6000", "0.7000"]
    assert lines[2].split()[-4:] == ["0.6100", "0.6000", "nan", "nan"] and "(measured)" in lines[2]


def test_refuses_a_batch_the_mesh_cannot_split_before_any_work(tmp_path, capsys):
    assert sd.main(["--mesh", "4x2", "--batch", "6", "--output", str(tmp_path / "out")]) == 2
    assert "--batch 6 must divide by the mesh's 4 batch chips" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_command_trains_on_the_mesh_and_scores_the_held_out_rows(tmp_path):
    """Two steps of 8 rows on mesh (2, 4), 24 held-out rows: the plan, steps/s and the table are printed."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "sharded_decoder.py"), "--steps", "2", "--length", "32",
                        "--heldout-limit", "24", "--output", str(out), "--torch-report", str(tmp_path / "none.json")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "SmolLM2-135M-Instruct at fp32, mesh (2, 4) (batch x model), batch 8 x length 32" in p.stdout
    assert "token_embedding/embeddings (49152, 576) -> ('model', None): (12288, 576) per chip" in p.stdout
    assert "chip 7 (batch 1, model 3)" in p.stdout and "replicated though splittable: 120 tensors" in p.stdout
    r = json.loads((out / "sharded_report.json").read_text())
    assert r["mesh"] == [2, 4] and len(r["losses"]) == 2 and r["steps_per_s"] > 0 and r["tokens_per_s"] > 0
    assert set(r["auc"]) >= {"all"} and 0 <= r["auc"]["all"] <= 1 and r["torch_source"].startswith("recorded")
    assert "steps/s" in p.stdout and "torch SmolLM2-135M LoRA r=16 (recorded)" in p.stdout
    assert (out / "adapter" / "kitlib-keras-adapter.json").is_file()
