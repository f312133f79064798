"""Atomic replace (issue 12 item 9): after any failure the destination is the old one or the complete new one.

Failures are injected at each step of :func:`kitlib.atomic.atomic_dir` (the body, the swap, each
rename of the fallback, the deletion of the old folder) and of the merger's CSV writer.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from kitlib import atomic
from kitlib.atomic import atomic_dir, atomic_write
from kitlib.outputs.merge import _write_csv

ROOT = Path(__file__).resolve().parents[1]


def make_old(final: Path) -> None:
    """An earlier output of the kit: its manifest names what the kit wrote (kitlib.atomic.MANIFEST)."""
    final.mkdir(parents=True)
    (final / "weights.bin").write_text("old weights")
    (final / "config.json").write_text("old config")
    (final / atomic.MANIFEST).write_text("config.json\nweights.bin\n")


def write_new(tmp: Path) -> None:
    (tmp / "weights.bin").write_text("new weights")
    (tmp / "tokenizer.json").write_text("new tokenizer")


def contents(d: Path) -> dict[str, str]:
    """What a folder holds, less the kit's manifest of it."""
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.name != atomic.MANIFEST}


OLD = {"config.json": "old config", "weights.bin": "old weights"}
NEW = {"tokenizer.json": "new tokenizer", "weights.bin": "new weights"}


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


@pytest.fixture(params=["exchange", "fallback"])
def mode(request, monkeypatch):
    """Run each test with the Linux atomic swap and with the three-step fallback."""
    if request.param == "fallback":
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    return request.param


def test_exchange_really_swaps_on_this_machine(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("a")
    (tmp_path / "b").write_text("b is a file")
    assert atomic._exchange(tmp_path / "a", tmp_path / "b") is sys.platform.startswith("linux")
    if sys.platform.startswith("linux"):
        assert (tmp_path / "a").read_text() == "b is a file" and (tmp_path / "b" / "f").read_text() == "a"


def test_new_folder(tmp_path, mode):
    with atomic_dir(tmp_path / "ckpt") as tmp:
        write_new(tmp)
    assert contents(tmp_path / "ckpt") == NEW and leftovers(tmp_path, "ckpt") == []


def test_replaces_old_folder_completely(tmp_path, mode):
    make_old(tmp_path / "ckpt")
    with atomic_dir(tmp_path / "ckpt") as tmp:
        write_new(tmp)
    assert contents(tmp_path / "ckpt") == NEW  # config.json of the old folder is gone, not merged
    assert leftovers(tmp_path, "ckpt") == []


def test_error_in_body_keeps_old(tmp_path, mode):
    make_old(tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_dir(tmp_path / "ckpt") as tmp:
            (tmp / "weights.bin").write_text("half")
            raise RuntimeError("disk full")
    assert contents(tmp_path / "ckpt") == OLD and leftovers(tmp_path, "ckpt") == []


def _failing_replace(monkeypatch, fail_call: int, exc=OSError("injected rename failure")):
    """Make the ``fail_call``-th os.replace (1-based) raise; the others run."""
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == fail_call:
            raise exc
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return calls


@pytest.mark.parametrize("step", [1, 2])
def test_fallback_rename_failure_keeps_old(tmp_path, monkeypatch, step):
    """Step 1 renames the old folder aside, step 2 renames the new one in: a failure at either leaves the old."""
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    make_old(tmp_path / "ckpt")
    calls = _failing_replace(monkeypatch, step)
    with pytest.raises(OSError, match="injected"):
        with atomic_dir(tmp_path / "ckpt") as tmp:
            write_new(tmp)
    assert contents(tmp_path / "ckpt") == OLD and leftovers(tmp_path, "ckpt") == []
    # the failure hit the intended step: 1 = old aside; 2 = new in (then the old renamed back)
    assert calls[0][0] == "ckpt" and calls[0][1].endswith(".old")
    if step == 2:
        assert calls[1][1] == "ckpt" and calls[2] == (calls[0][1], "ckpt")


def test_fallback_interrupt_between_renames_restores_old(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    make_old(tmp_path / "ckpt")
    _failing_replace(monkeypatch, 2, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(tmp_path / "ckpt") as tmp:
            write_new(tmp)
    assert contents(tmp_path / "ckpt") == OLD and leftovers(tmp_path, "ckpt") == []


def test_swap_failure_keeps_old(tmp_path, monkeypatch):
    def refuse(a, b):
        raise PermissionError(13, "injected swap failure")

    monkeypatch.setattr(atomic, "_exchange", refuse)
    make_old(tmp_path / "ckpt")
    with pytest.raises(PermissionError):
        with atomic_dir(tmp_path / "ckpt") as tmp:
            write_new(tmp)
    assert contents(tmp_path / "ckpt") == OLD and leftovers(tmp_path, "ckpt") == []


def test_failed_delete_of_old_still_gives_new(tmp_path, monkeypatch, mode):
    make_old(tmp_path / "ckpt")

    def rmtree(path, *a, **k):
        raise OSError("injected: cannot delete")

    monkeypatch.setattr(atomic.shutil, "rmtree", rmtree)
    with atomic_dir(tmp_path / "ckpt") as tmp:
        write_new(tmp)
    assert contents(tmp_path / "ckpt") == NEW
    (left,) = leftovers(tmp_path, "ckpt")  # the old folder, hidden, is all that is left behind
    assert contents(tmp_path / left) == OLD


@pytest.mark.parametrize("mode_name", ["exchange", "fallback"])
def test_killed_process_leaves_old_or_new(tmp_path, mode_name):
    """SIGKILL-like death (os._exit) right after the first rename or swap: the old folder survives somewhere whole."""
    make_old(tmp_path / "ckpt")
    code = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from kitlib import atomic
        def die_after(f):
            def g(*a):
                r = f(*a)
                os._exit(9)
            return g
        if {mode_name!r} == "exchange":
            atomic._exchange = die_after(atomic._exchange)
        else:
            atomic._exchange = lambda a, b: False
            atomic.os.replace = die_after(os.replace)
        with atomic.atomic_dir(Path(sys.argv[1])) as tmp:
            (tmp / "weights.bin").write_text("new weights")
            (tmp / "tokenizer.json").write_text("new tokenizer")
    """)
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert p.returncode == 9, p.stderr
    if mode_name == "exchange":
        assert contents(tmp_path / "ckpt") == NEW  # one atomic step: the new folder is in place
        (left,) = leftovers(tmp_path, "ckpt")
        assert contents(tmp_path / left) == OLD
    else:
        assert not (tmp_path / "ckpt").exists()  # the documented window of the fallback
        left = [n for n in leftovers(tmp_path, "ckpt") if n.endswith(".old")]
        assert len(left) == 1 and contents(tmp_path / left[0]) == OLD


def test_atomic_write_failure_keeps_old_file(tmp_path):
    out = tmp_path / "submission.csv"
    out.write_text("old\n")

    def write(tmp):
        Path(tmp).write_text("partial")
        raise OSError("injected write failure")

    with pytest.raises(OSError, match="injected"):
        atomic_write(out, write)
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["submission.csv"]


# ---- the merger's CSV writer: the quoting retry rewrites the whole file, a failure writes nothing ----

TABLE = pa.table({"id": ["a,b", 'say "hi"', "plain"], "toxic": [0.25, 0.5, 0.75]})
# pyarrow's "needed" style quotes every string of the file once one value needs it
EXPECTED = 'id,toxic\n"a,b",0.25\n"say ""hi""",0.5\n"plain",0.75\n'


def test_write_csv_quotes_only_when_needed(tmp_path):
    atomic_write(tmp_path / "s.csv", lambda tmp: _write_csv(TABLE, tmp))
    assert (tmp_path / "s.csv").read_text() == EXPECTED
    plain = pa.table({"id": ["x", "y"], "toxic": [0.5, 1.0]})
    atomic_write(tmp_path / "p.csv", lambda tmp: _write_csv(plain, tmp))
    assert (tmp_path / "p.csv").read_text() == "id,toxic\nx,0.5\ny,1\n"


def test_write_csv_retry_truncates_the_first_attempt(tmp_path, monkeypatch):
    real, styles = pacsv.write_csv, []

    def write_csv(table, f, options):
        styles.append(options.quoting_style)
        if options.quoting_style == "none":
            f.write(b"junk left by a failed attempt\n" * 50)  # longer than the good file
            raise pa.ArrowInvalid("injected: value needs quotes")
        return real(table, f, options)

    monkeypatch.setattr(pacsv, "write_csv", write_csv)
    atomic_write(tmp_path / "s.csv", lambda tmp: _write_csv(TABLE, tmp))
    assert styles == ["none", "needed"]
    assert (tmp_path / "s.csv").read_text() == EXPECTED


@pytest.mark.parametrize("second", [pa.ArrowInvalid, OSError])
def test_write_csv_second_failure_writes_nothing(tmp_path, monkeypatch, second):
    out = tmp_path / "s.csv"
    out.write_text("earlier good submission\n")

    def write_csv(table, f, options):
        f.write(b"id,toxic\npartial")
        raise (pa.ArrowInvalid("injected first") if options.quoting_style == "none" else second("injected second"))

    monkeypatch.setattr(pacsv, "write_csv", write_csv)
    with pytest.raises(second, match="injected second"):
        atomic_write(out, lambda tmp: _write_csv(TABLE, tmp))
    assert out.read_text() == "earlier good submission\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]


# issue 27 item 4: a destination that is a symbolic link (Colab: into a mounted Drive) is written
# through; the link stays and the drive gets the new file or folder.
def test_atomic_write_through_a_link_replaces_the_target(tmp_path):
    drive, local = tmp_path / "drive", tmp_path / "work"
    drive.mkdir(), local.mkdir()
    (drive / "submission.csv").write_text("old")
    link = local / "submission.csv"
    link.symlink_to(drive / "submission.csv")
    atomic_write(link, lambda tmp: Path(tmp).write_text("new"))
    assert link.is_symlink() and os.readlink(link) == str(drive / "submission.csv")
    assert (drive / "submission.csv").read_text() == "new"
    assert sorted(p.name for p in local.iterdir()) == ["submission.csv"]
    assert sorted(p.name for p in drive.iterdir()) == ["submission.csv"]  # the temporary was beside the target


def test_atomic_write_through_a_dangling_link_creates_the_target(tmp_path):
    (tmp_path / "drive").mkdir()
    link = tmp_path / "submission.csv"
    link.symlink_to(tmp_path / "drive" / "submission.csv")
    atomic_write(link, lambda tmp: Path(tmp).write_text("new"))
    assert link.is_symlink() and (tmp_path / "drive" / "submission.csv").read_text() == "new"


def test_atomic_dir_through_a_link_replaces_the_linked_folder(tmp_path, mode):
    drive = tmp_path / "drive" / "xlmr-toxic"
    make_old(drive)
    link = tmp_path / "artifacts" / "xlmr-toxic"
    link.parent.mkdir()
    link.symlink_to(drive, target_is_directory=True)
    with atomic_dir(link) as tmp:
        write_new(tmp)
    assert link.is_symlink() and contents(drive) == NEW and contents(link) == NEW
    assert leftovers(drive.parent, "xlmr-toxic") == [] and sorted(p.name for p in link.parent.iterdir()) == ["xlmr-toxic"]


# issue 27 item 5: what the kit writes gets the modes a plain create under the umask gives
# (mkdtemp makes 0700, mkstemp and safetensors' save_file 0600).
@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o002, 0o664, 0o775)])
def test_modes_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    import torch
    from safetensors.torch import save_file

    old = os.umask(umask)
    try:
        with atomic_dir(tmp_path / "ckpt") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # 0600 by itself
            (tmp / "sub").mkdir()
            (tmp / "sub" / "config.json").write_text("{}")
        atomic_write(tmp_path / "submission.csv", lambda t: Path(t).write_text("id,toxic\n"))
        plain = tmp_path / "plain.csv"
        plain.write_text("")  # what a plain create gives
    finally:
        os.umask(old)
    mode = lambda p: p.stat().st_mode & 0o7777  # noqa: E731
    assert mode(plain) == file_mode
    assert mode(tmp_path / "ckpt") == dir_mode and mode(tmp_path / "ckpt" / "sub") == dir_mode
    assert mode(tmp_path / "ckpt" / "model.safetensors") == file_mode
    assert mode(tmp_path / "ckpt" / "sub" / "config.json") == file_mode
    assert mode(tmp_path / "submission.csv") == file_mode


def test_current_umask_reads_without_changing_it():
    old = os.umask(0o027)
    try:
        assert atomic.current_umask() == 0o027 and atomic.current_umask() == 0o027
    finally:
        os.umask(old)


def test_a_linked_output_dir_keeps_its_run_records_beside_the_target(tmp_path):
    """Issue 27 item 4: the resume state and the runs table follow a linked output_dir to its drive."""
    from kitlib.training.resume import state_dir
    from kitlib.training.runs import runs_table

    (tmp_path / "drive").mkdir()
    link = tmp_path / "work" / "xlmr-toxic"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "drive" / "xlmr-toxic", target_is_directory=True)  # dangling until the first save
    assert state_dir(link) == tmp_path / "drive" / "xlmr-toxic.state"
    assert runs_table(link) == tmp_path / "drive" / "runs.csv"
    assert state_dir(tmp_path / "plain") == tmp_path / "plain.state"


# --- issue 33 item 1: the kit replaces only what it owns ---


def test_a_folder_with_a_users_file_is_refused_before_the_body_and_keeps_it(tmp_path, mode):
    out = tmp_path / "xlmr-toxic"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "other-model").mkdir()
    ran = []
    with pytest.raises(atomic.NotOwnedError, match=r"holds entries the kit did not write: notes.txt, other-model"):
        with atomic_dir(out) as tmp:
            ran.append(tmp)
    assert ran == [] and (out / "notes.txt").read_text() == "my notes" and (out / "other-model").is_dir()
    assert leftovers(tmp_path, "xlmr-toxic") == []


def test_a_linked_folder_with_a_users_files_is_refused_and_keeps_them(tmp_path, mode):
    drive = tmp_path / "drive" / "MyDrive"
    drive.mkdir(parents=True)
    (drive / "thesis.pdf").write_text("years of work")
    link = tmp_path / "artifacts" / "xlmr-toxic"
    link.parent.mkdir()
    link.symlink_to(drive, target_is_directory=True)
    with pytest.raises(atomic.NotOwnedError, match=f"a link to {drive}.*thesis.pdf"):
        with atomic_dir(link) as tmp:
            write_new(tmp)
    assert (drive / "thesis.pdf").read_text() == "years of work" and link.is_symlink()


def test_an_empty_folder_is_taken_and_the_kits_own_output_replaced(tmp_path, mode):
    out = tmp_path / "ckpt"
    out.mkdir()
    with atomic_dir(out) as tmp:
        write_new(tmp)
    assert contents(out) == NEW and atomic.owned_entries(out) == {"weights.bin", "tokenizer.json", atomic.MANIFEST}
    atomic_write(out / "heldout_scores.json", lambda t: Path(t).write_text("{}"))  # a file the kit adds later is its own
    assert atomic.foreign_entries(out) == []
    with atomic_dir(out) as tmp:
        (tmp / "weights.bin").write_text("newer")
    assert contents(out) == {"weights.bin": "newer"}


def test_a_file_the_user_adds_to_a_kit_folder_stops_the_next_swap(tmp_path, mode):
    out = tmp_path / "ckpt"
    with atomic_dir(out) as tmp:
        write_new(tmp)
    (out / "my-notes.md").write_text("mine")
    with pytest.raises(atomic.NotOwnedError, match="my-notes.md"):
        with atomic_dir(out) as tmp:
            write_new(tmp)
    assert (out / "my-notes.md").read_text() == "mine" and contents(out)["weights.bin"] == "new weights"


def test_a_file_that_appears_during_the_work_keeps_both_the_file_and_the_new_folder(tmp_path, mode):
    out = tmp_path / "ckpt"
    make_old(out)
    with pytest.raises(atomic.NotOwnedError, match="appeared.txt.*The new folder is kept at") as e:
        with atomic_dir(out) as tmp:
            write_new(tmp)
            (out / "appeared.txt").write_text("written by someone else meanwhile")
    kept = Path(str(e.value).rsplit("kept at ", 1)[1].rstrip("."))
    assert (out / "appeared.txt").is_file() and contents(out)["weights.bin"] == "old weights"
    assert contents(kept) == NEW
