"""scripts/check_pairs.py: the pair check (CI), the sync step, and the jupytext pre-commit hook."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import check_pairs  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
JUPYTEXT = str(Path(PY).parent / "jupytext")

DEMO = '''\
# %% [markdown]
# # Demo

# %% tags=["parameters"]
n = 3

# %%
print(n * 2)
'''


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python scripts/check_pairs.py ARGS`` run in ``cwd``, in-process (jupytext imported once)."""
    import contextlib
    import io
    import os

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = check_pairs.main(list(args))
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def test_ci_command_runs_as_a_script(repo):
    """The exact CI command, as a subprocess from the repository root."""
    r = subprocess.run([PY, str(ROOT / "scripts" / "check_pairs.py")], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "1/1 notebook pair(s) in sync", r.stdout + r.stderr
    (repo / "notebooks" / "demo.py").write_text(DEMO.replace("n = 3", "n = 9"))
    r = subprocess.run([PY, str(ROOT / "scripts" / "check_pairs.py")], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "notebooks/demo.ipynb: differs from what jupytext makes of notebooks/demo.py" in r.stderr


@pytest.fixture
def repo(tmp_path):
    """A git repository with jupytext.toml and one committed, synced pair notebooks/demo.{py,ipynb}."""
    shutil.copy(ROOT / "jupytext.toml", tmp_path / "jupytext.toml")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "demo.py").write_text(DEMO)
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    r = check("--sync", "notebooks/demo.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "pair")
    return tmp_path


def edit_ipynb(path: Path, old: str, new: str) -> None:
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        c["source"] = [s.replace(old, new) for s in c["source"]] if isinstance(c["source"], list) else c["source"].replace(old, new)
    path.write_text(json.dumps(nb, indent=1) + "\n")


def test_synced_pair_is_deterministic(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    d = json.loads(nb.read_text())
    assert d["metadata"]["kernelspec"]["name"] == "python3"
    assert all(c.get("id") for c in d["cells"])
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in d["cells"] if c["cell_type"] == "code")
    assert "jupytext_version" not in py.read_text() and "jupytext_version" not in nb.read_text()
    assert py.read_text().startswith("# ---\n# jupyter:\n#   kernelspec:")  # the header sync added
    r = check(cwd=repo)  # the CI command, from the repository root
    assert r.returncode == 0 and "1/1 notebook pair(s) in sync" in r.stdout, r.stderr
    ids = [c["id"] for c in d["cells"]]
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", "notebooks/demo", cwd=repo)
    assert r.returncode == 0 and "nothing to change" in r.stdout
    assert (py.read_bytes(), nb.read_bytes()) == before
    # an edit keeps the existing cell ids
    py.write_text(py.read_text().replace("print(n * 2)", "print(n * 2)\n\n# %%\nm = n + 1"))
    assert check("--sync", "notebooks/demo", cwd=repo).returncode == 0
    ids2 = [c["id"] for c in json.loads(nb.read_text())["cells"]]
    assert ids2[:3] == ids and len(ids2) == 4


def test_check_fails_when_the_pair_disagrees(repo):
    py = repo / "notebooks" / "demo.py"
    py.write_text(py.read_text().replace("n = 3", "n = 4"))
    r = check(cwd=repo)
    assert r.returncode == 1
    assert "notebooks/demo.ipynb: differs from what jupytext makes of notebooks/demo.py" in r.stderr


@pytest.mark.parametrize("damage,message", [
    ("outputs", "cell 2 has outputs or an execution count"),
    ("kernelspec", "metadata.kernelspec.name is not 'python3'"),
    ("version", "carries jupytext_version"),
    ("id", "cell 1 has no id"),
])
@pytest.mark.filterwarnings("ignore:Cell is missing an id field")
def test_check_fails_on_a_non_deterministic_ipynb(repo, damage, message):
    nb = repo / "notebooks" / "demo.ipynb"
    d = json.loads(nb.read_text())
    if damage == "outputs":
        d["cells"][2]["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["6\n"]}]
        d["cells"][2]["execution_count"] = 1
    elif damage == "kernelspec":
        del d["metadata"]["kernelspec"]
    elif damage == "version":
        d["metadata"]["jupytext"] = {"text_representation": {"jupytext_version": "1.19.6"}}
    else:
        del d["cells"][1]["id"]
    nb.write_text(json.dumps(d, indent=1) + "\n")
    r = check(cwd=repo)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    # the sync step repairs it (outputs cleared, kernelspec set, version dropped, ids added)
    r = check("--sync", "--from", "ipynb", "notebooks/demo", cwd=repo)
    assert r.returncode == 0, r.stderr
    assert check(cwd=repo).returncode == 0


def test_check_fails_on_a_missing_side(repo):
    (repo / "notebooks" / "other.py").write_text(DEMO)
    r = check(cwd=repo)
    assert r.returncode == 1 and "notebooks/other.ipynb: missing (its pair notebooks/other.py exists)" in r.stderr


def test_sync_takes_the_changed_side(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    py.write_text(py.read_text().replace("n = 3", "n = 4"))
    r = check("--sync", cwd=repo)
    assert r.returncode == 0 and "synced from notebooks/demo.py" in r.stdout, r.stderr
    assert '"n = 4"' in nb.read_text()
    git(repo, "commit", "-qam", "py edit")
    edit_ipynb(nb, "n = 4", "n = 5")
    r = check("--sync", cwd=repo)
    assert r.returncode == 0 and "synced from notebooks/demo.ipynb" in r.stdout, r.stderr
    assert "\nn = 5\n" in py.read_text()
    assert check(cwd=repo).returncode == 0


def test_sync_refuses_when_both_sides_changed_and_keeps_both_edits(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    py.write_text(py.read_text().replace("n = 3", "n = 4"))
    edit_ipynb(nb, "print(n * 2)", "print(n * 3)")
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", cwd=repo)
    assert r.returncode == 1
    assert "notebooks/demo.py and notebooks/demo.ipynb both changed since the last commit" in r.stderr
    assert (py.read_bytes(), nb.read_bytes()) == before  # no edit dropped
    # an explicit choice is honoured
    r = check("--sync", "--from", "py", cwd=repo)
    assert r.returncode == 0 and '"n = 4"' in nb.read_text() and "n * 3" not in nb.read_text()


def test_sync_refuses_when_it_cannot_tell_which_side_is_the_edit(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    py.write_text(py.read_text().replace("n = 3", "n = 4"))
    git(repo, "commit", "-qam", "committed out of sync")
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", cwd=repo)
    assert r.returncode == 1 and "cannot tell which holds the edit" in r.stderr
    assert "notebooks/demo.py and notebooks/demo.ipynb disagree" in r.stderr
    assert (py.read_bytes(), nb.read_bytes()) == before


def test_pre_commit_hook_refuses_both_sides_staged(repo):
    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for r in cfg["repos"] for h in r["hooks"]}
    entry = hooks["jupytext-sync"]["entry"]
    assert entry.split()[1:] == ["--pre-commit-mode", "--sync"]
    assert hooks["check-pairs"]["entry"].endswith("scripts/check_pairs.py")
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    py.write_text(py.read_text().replace("n = 3", "n = 4"))
    edit_ipynb(nb, "n = 3", "n = 5")
    git(repo, "add", "-A")
    before = (py.read_bytes(), nb.read_bytes())
    r = subprocess.run([JUPYTEXT, *entry.split()[1:], "notebooks/demo.py", "notebooks/demo.ipynb"], cwd=repo,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "revert JUST ONE of the files" in r.stdout + r.stderr
    assert (py.read_bytes(), nb.read_bytes()) == before
    # one side staged: the hook syncs the other and asks for it to be added
    git(repo, "checkout", "HEAD", "--", "notebooks/demo.ipynb")
    r = subprocess.run([JUPYTEXT, *entry.split()[1:], "notebooks/demo.py", "notebooks/demo.ipynb"], cwd=repo,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "git add notebooks/demo.ipynb" in r.stdout + r.stderr
    assert '"n = 4"' in nb.read_text()


def test_repository_notebooks_sync_cleanly(tmp_path):
    """Every repository notebook, synced from its .py in a scratch copy, passes the check, and a
    second sync changes nothing (the pair is stable)."""
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
    assert names, "no notebooks/*.py in the repository"
    shutil.copy(ROOT / "jupytext.toml", tmp_path / "jupytext.toml")
    (tmp_path / "notebooks").mkdir()
    for n in names:
        shutil.copy(ROOT / "notebooks" / f"{n}.py", tmp_path / "notebooks" / f"{n}.py")
        if (ROOT / "notebooks" / f"{n}.ipynb").exists():
            shutil.copy(ROOT / "notebooks" / f"{n}.ipynb", tmp_path / "notebooks" / f"{n}.ipynb")
    r = check("--sync", "--from", "py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    snapshot = {p: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()}
    r = check("--sync", "--from", "py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("nothing to change") == len(names), r.stdout
    assert {p: p.read_bytes() for p in (tmp_path / "notebooks").iterdir()} == snapshot
    assert check(cwd=tmp_path).returncode == 0


# ---------------------------------------------------------------------------------------------
# issue 13, items 7 and 8: sync brings back what Kaggle's editor saved, and never writes a text
# that the round trip would change
# ---------------------------------------------------------------------------------------------
def as_kaggle_editor_saves(nb_path: Path, edit: tuple[str, str]) -> None:
    """Rewrite ``nb_path`` as Kaggle's editor saves a notebook: nbformat 4.4, no cell ids, Kaggle's
    own cell metadata, outputs, and ``metadata.kaggle`` with Kaggle's accelerator name."""
    d = json.loads(nb_path.read_text())
    d["nbformat_minor"] = 4
    d["metadata"]["kaggle"] = {"accelerator": "tpuV5e8", "dataSources": [], "dockerImageVersionId": 31012,
                               "isInternetEnabled": False, "language": "python", "sourceType": "notebook",
                               "isGpuEnabled": False}
    d["metadata"]["language_info"] = {"name": "python", "version": "3.11.11"}
    for i, c in enumerate(d["cells"]):
        del c["id"]
        c["metadata"].update({"_uuid": f"uuid-{i}", "trusted": True})
        c["source"] = c["source"].replace(*edit) if isinstance(c["source"], str) else [s.replace(*edit) for s in c["source"]]
        if c["cell_type"] == "code":
            c["execution_count"] = i
            c["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["14\n"]}]
    nb_path.write_text(json.dumps(d, indent=1) + "\n")


@pytest.mark.filterwarnings("ignore:Cell is missing an id field")
def test_sync_brings_back_a_notebook_saved_by_kaggles_editor(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    as_kaggle_editor_saves(nb, ("n = 3", "n = 7"))
    r = check(cwd=repo)
    assert r.returncode == 1 and "nbformat 4.4, want 4.5+" in r.stderr and "cell 0 has no id" in r.stderr
    r = check("--sync", cwd=repo)
    assert r.returncode == 0 and "synced from notebooks/demo.ipynb" in r.stdout, r.stdout + r.stderr
    d = json.loads(nb.read_text())
    assert (d["nbformat"], d["nbformat_minor"]) == (4, 5)
    assert all(c.get("id") for c in d["cells"]) and len({c["id"] for c in d["cells"]}) == len(d["cells"])
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in d["cells"] if c["cell_type"] == "code")
    assert "\nn = 7\n" in py.read_text() and "#     accelerator: tpuV5e8\n" in py.read_text()
    assert check(cwd=repo).returncode == 0
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", cwd=repo)  # stable: the next sync has nothing to do
    assert r.returncode == 0 and "nothing to change" in r.stdout and (py.read_bytes(), nb.read_bytes()) == before


MERMAID = "Flow:\n\ngraph TD\n  %% the merge step\n  A-->B"


def test_sync_refuses_a_cell_the_percent_format_would_change_and_writes_nothing(repo):
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    d = json.loads(nb.read_text())
    d["cells"][0]["source"] = MERMAID  # a markdown cell with an indented '%%' line (a Mermaid comment)
    nb.write_text(json.dumps(d, indent=1) + "\n")
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", cwd=repo)
    assert r.returncode == 1
    assert "notebooks/demo.ipynb: cell 0 (a markdown cell 'Flow:'...) does not survive the round trip through .py" in r.stderr
    assert "A line starting with '%%' in a markdown cell reads as a cell marker" in r.stderr
    assert "nothing written" in r.stderr
    assert (py.read_bytes(), nb.read_bytes()) == before  # the edited side is not rewritten, nor the other
    assert check(cwd=repo).returncode == 1  # and the pair check does not call it in sync


def test_sync_refusing_a_kaggle_notebook_writes_nothing(repo):
    """A notebook from Kaggle's editor that the round trip would change: refused, both files as they were."""
    py, nb = repo / "notebooks" / "demo.py", repo / "notebooks" / "demo.ipynb"
    as_kaggle_editor_saves(nb, ("# Demo", MERMAID))
    before = (py.read_bytes(), nb.read_bytes())
    r = check("--sync", cwd=repo)
    assert r.returncode == 1 and "does not survive the round trip" in r.stderr, r.stderr
    assert (py.read_bytes(), nb.read_bytes()) == before
