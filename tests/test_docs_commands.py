"""Docs that run (issue 25.9): the shell commands of README.md and docs/*.md.

* Every ``scripts/kernels.py`` / ``python -m kaggle_kit`` command in a fenced ``bash`` block is
  parsed by the push tool's own argument parser (optional parts in ``[...]`` left out,
  ``<placeholders>`` filled in): no doc cites a subcommand or an option that does not exist.
* The blocks that run offline are run as written, in a scratch copy of the repository, against the
  fake Kaggle API where they talk to Kaggle: the dry run of docs/kernels.md section 4, the whole
  loop of its section 9, and README's push set-up check (``python -m kaggle_kit --help``).
* Figures the docs used to quote by hand (module counts, the vendored cell's size) are gone.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from test_kaggle_loop import SAMPLE_IDS, labels_and_predictions  # noqa: E402
from test_kernels import ROOT  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def bash_blocks(path: Path) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) in ("bash", "sh", "")]


def commands(block: str) -> list[str]:
    """The block's command lines (continuations joined, comments dropped)."""
    out, line = [], ""
    for raw in block.splitlines():
        line += raw.rstrip()
        if line.endswith("\\"):
            line = line[:-1] + " "
            continue
        code = line.split(" #")[0].strip()
        if code and not code.startswith("#"):
            out.append(code)
        line = ""
    return out


def kit_arguments(cmd: str) -> list[str] | None:
    """The arguments after ``scripts/kernels.py`` or ``-m kaggle_kit``; None for other commands."""
    m = re.search(r"(?:scripts/kernels\.py|-m kaggle_kit)\s+(.*)$", cmd)
    if not m:
        return None
    text = re.sub(r"\[[^\]]*\]", "", m.group(1))  # optional parts
    text = re.sub(r"<[^>]+>", "some-slug", text).replace("...", "x")
    text = text.split("|")[0].split("&")[0]
    return shlex.split(text)


DOC_COMMANDS = [(p.relative_to(ROOT).as_posix(), c) for p in DOCS for b in bash_blocks(p) for c in commands(b)
                if kit_arguments(c) is not None]


def test_docs_cite_kernels_commands():
    assert len(DOC_COMMANDS) >= 20, DOC_COMMANDS  # the loop, sections 4-10 of docs/kernels.md, README


@pytest.mark.parametrize("where,cmd", DOC_COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in DOC_COMMANDS])
def test_every_kernels_command_in_the_docs_parses(where, cmd):
    from kaggle_kit.cli import _parser

    args = kit_arguments(cmd)
    try:
        _parser().parse_args(args)
    except SystemExit as e:
        if e.code:  # --help exits 0
            pytest.fail(f"{where}: {cmd!r} does not parse as a command of the push tool")


def test_hand_quoted_figures_are_gone():
    text = (ROOT / "docs" / "kernels.md").read_text(encoding="utf-8")
    assert not re.search(r"\b\d+ modules\b|\b\d+ KB\b", text), re.findall(r".{40}\b\d+ (?:modules|KB)\b.{20}", text)
    assert "scripts/kaggle_kernels" not in text


def _scratch_repo(tmp: Path) -> Path:
    """A copy of what the push tool needs, so the docs' relative paths (build/, outputs/, labels.csv) land here."""
    dst = tmp / "repo"
    for name in ("kaggle_kit", "kitlib", "scripts", "notebooks", "data", "tests"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"))
    for name in ("kernel-metadata.json", "jupytext.toml", "notebook_pairs.py", "pyproject.toml", "constraints.txt"):
        shutil.copy2(ROOT / name, dst / name)
    (dst / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # the docs' .venv/bin/python: this environment
    return dst


def _block(path: Path, needle: str) -> str:
    return next(b for b in bash_blocks(path) if needle in b)


def _run(block: str, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + block
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _clean_env(repo: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("KAGGLE_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"))}
    env.update(PYTHONPATH=str(repo), HOME=str(repo / ".home"), KAGGLE_CONFIG_DIR=str(repo / ".home" / "kaggle"))
    return env


def test_kernels_md_dry_run_block_runs(tmp_path):
    repo = _scratch_repo(tmp_path)
    env = {**_clean_env(repo), "KAGGLE_USERNAME": "me", "KAGGLE_KEY": "unused"}  # validate sends nothing
    block = _block(ROOT / "docs" / "kernels.md", "push --dry-run")
    r = _run(block, repo, env)
    # as shipped the training entry attaches no model: validate of every notebook refuses it, saying what to attach
    assert "model_sources: the notebook trains with model='auto'" in r.stderr, r.stdout + r.stderr
    meta = (repo / "kernel-metadata.json").read_text()
    (repo / "kernel-metadata.json").write_text(meta.replace(
        '"xla_ddp_train": {"title": "XLM-R DDP training with torch_xla", "accelerator": "tpu"}',
        '"xla_ddp_train": {"title": "XLM-R DDP training with torch_xla", "accelerator": "tpu", '
        '"model_sources": ["me/xlm-roberta/transformers/base/1"]}').replace(
        '"ttt_train_predict": {"title": "Test-time LoRA training and prediction", "accelerator": "gpu"}',
        '"ttt_train_predict": {"title": "Test-time LoRA training and prediction", "accelerator": "gpu", '
        '"model_sources": ["me/qwen-3/transformers/4b/1"]}').replace(
        '"keras_sharded_lora": {"title": "Sharded decoder LoRA with Keras 3 on JAX", "accelerator": "tpu"}',
        '"keras_sharded_lora": {"title": "Sharded decoder LoRA with Keras 3 on JAX", "accelerator": "tpu", '
        '"model_sources": ["me/smollm2/transformers/135m/1"]}'))
    r = _run(block, repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 kernel(s) valid; dry run: nothing sent" in r.stdout and "1 kernel(s) valid; dry run: nothing sent" in r.stdout
    assert re.search(r"parameter +xla_multicore_inference", r.stdout) and re.search(r"max_len +256 \*", r.stdout), r.stdout


def test_kernels_md_fake_loop_block_runs_as_written(tmp_path):
    repo = _scratch_repo(tmp_path)
    labels, _, data = labels_and_predictions()
    (repo / "labels.csv").write_text("id,toxic\n" + "".join(f"{i},{labels[i]}\n" for i in SAMPLE_IDS))
    (repo / "config.json").write_text("{}")
    (repo / "sub.csv").write_bytes(data)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    block = _block(ROOT / "docs" / "kernels.md", "fake_kaggle.py --port").replace("8765", str(port))
    r = _run(block, repo, _clean_env(repo))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "effective parameters" in r.stdout and "submission 1000 (submission.csv) scored: public" in r.stdout
    assert (repo / "outputs" / "kernels" / "xlm-r-multicore-inference-on-tpu" / "v2" / "submission.csv").read_bytes() == data


def test_readme_push_setup_check_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`make setup-push`" in readme and "-m kaggle_kit --help" in readme
    r = subprocess.run([sys.executable, "-m", "kaggle_kit", "--help"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and "publish" in r.stdout, r.stdout + r.stderr


NOTEBOOK_STEMS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
DOC_PARAMETER = re.compile(r"(?<![\w-])(?<!mkdir )-p\s+(?:([\w.]+):)?([A-Za-z_]\w*)")


def notebook_parameters(stem: str) -> list[str]:
    """The names the parameters cell of ``notebooks/<stem>.py`` assigns (kitlib.params.assigned_names)."""
    import jupytext

    from kitlib.params import assigned_names

    nb = jupytext.read(ROOT / "notebooks" / f"{stem}.py")
    return assigned_names(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])))


def doc_parameters() -> list[tuple[str, str, list[str]]]:
    """``(where, NAME, notebooks)`` for every ``-p NAME`` (or ``-p MEMBER:NAME``) in README.md and docs/*.md:
    the notebooks are the member, else those the paragraph names, else the training notebook for
    ``TRAIN_EXTRA``, else every notebook. Placeholders (``NAME``, ``name``) are left out."""
    out = []
    for path in DOCS:
        for para in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            named = [s for s in NOTEBOOK_STEMS if s in para] or (["xla_ddp_train"] if "TRAIN_EXTRA" in para else NOTEBOOK_STEMS)
            for m in DOC_PARAMETER.finditer(para.replace("\\\n", " ")):
                if m.group(2) in ("name", "NAME") or m.group(2).isupper():
                    continue
                out.append((path.relative_to(ROOT).as_posix(), m.group(2), [m.group(1)] if m.group(1) else named))
    return out


def test_every_parameter_the_docs_name_exists():
    found = doc_parameters()
    assert len(found) >= 40 and ("docs/training-torch.md", "num_devices", ["xla_ddp_train"]) in found
    missing = [f"{where}: -p {name} (not a parameter of {' or '.join(stems)})" for where, name, stems in found
               if not any(name in notebook_parameters(s) for s in stems)]
    assert not missing, "\n".join(missing)


def test_docs_name_no_training_job_field_as_a_notebook_parameter():
    # issue 34.2: docs/training-torch.md offered save_every_steps, which only TrainJob has; -p save_every_steps
    # was ignored by papermill and the run went on with the defaults
    text = (ROOT / "docs" / "training-torch.md").read_text(encoding="utf-8")
    assert "save_every_steps" not in notebook_parameters("xla_ddp_train")
    assert "(or `save_every_steps`)" not in text


def test_readme_has_one_ordered_kaggle_list_the_others_link_to():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### On Kaggle, in five steps\n")[1].split("\n## ")[0]
    steps = re.findall(r"^(\d)\. \*\*(.+?)\*\*", section, re.M)
    assert [n for n, _ in steps] == ["1", "2", "3", "4", "5"], steps
    assert [t for _, t in steps][2:] == ["Rehearse on this machine", "A model the kernel can load offline", "Run the chain and submit"]
    assert readme.count("(#on-kaggle-in-five-steps)") >= 2
    assert "(../README.md#on-kaggle-in-five-steps)" in (ROOT / "docs" / "kernels.md").read_text(encoding="utf-8")


def test_kernels_md_pair_block_runs_and_sync_says_nothing_to_change(tmp_path):
    """docs/kernels.md section 2 as written, in a scratch git repository: the check passes and --sync,
    with nothing edited, prints 'nothing to change' for each pair (issue 34.5: the doc said it refused)."""
    repo = _scratch_repo(tmp_path)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "notebooks", "jupytext.toml", "notebook_pairs.py", "scripts"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "scratch"], cwd=repo, check=True)
    r = _run(_block(ROOT / "docs" / "kernels.md", "check_pairs.py --sync"), repo, _clean_env(repo), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for stem in NOTEBOOK_STEMS:
        assert f"notebooks/{stem}: synced from notebooks/{stem}.py, nothing to change" in r.stdout, r.stdout + r.stderr
