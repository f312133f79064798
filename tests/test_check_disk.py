"""scripts/check_disk.py: a set-up that cannot fit on the disks it writes stops before it starts,
saying which filesystem, how much it needs and has (a CI run's set-up ended after 146 s with pip's
"[Errno 28] No space left on device"); one that fits only if pip's cache already holds the wheels is
warned about, not refused. Every filesystem the set-up writes is checked (the venv, TMPDIR, pip's
cache: issue 27.10, where TMPDIR and the cache on a 64 MiB tmpfs passed), each with its share,
summed where they share one."""
import importlib.util
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_disk.py"
spec = importlib.util.spec_from_file_location("check_disk", SCRIPT)
check_disk = sys.modules["check_disk"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(check_disk)
GB = 1024**3
MiB = 2**20
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def disks(monkeypatch, tmp_path):
    """Fake filesystems: ``disks(venv=(dev, free), tmp=(dev, free), cache=(dev, free))`` makes
    tmp_path/venv, tmp_path/tmp and tmp_path/cache look as if they were on those devices."""
    def make(**spec):
        folders = {name: tmp_path / name for name in spec}
        for f in folders.values():
            f.mkdir(exist_ok=True)
        by_folder = {folders[n]: v for n, v in spec.items()}

        def lookup(path):
            path = Path(path).absolute()
            for f, v in by_folder.items():
                if path == f or f in path.parents:
                    return v
            raise AssertionError(f"no fake filesystem for {path}")

        monkeypatch.setattr(check_disk, "_device", lambda p: lookup(p)[0])
        monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(64 * GB, 0, lookup(p)[1]))
        return folders
    return make


def _check(folders, installed_gb=11, download_gb=5.5, cache=True):
    where = check_disk.places(folders["venv"] / ".venv", installed_gb, download_gb,
                              folders["cache"] if cache else None, tmpdir=folders["tmp"])
    return check_disk.verdict(check_disk.filesystems(where), "make test's environment")


def test_tmpdir_and_pips_cache_on_a_small_tmpfs_are_refused_naming_that_filesystem(disks):
    # the case: the venv's disk is big, TMPDIR and pip's cache share a 64 MiB tmpfs
    f = disks(venv=(1, 200 * GB), tmp=(2, 64 * MiB), cache=(2, 64 * MiB))
    rc, msg = _check(f)
    assert rc == 1
    assert msg.startswith(f"error: not enough disk for make test's environment: the filesystem holding "
                          f"TMPDIR ({f['tmp']}) and pip's cache ({f['cache']}) must hold 5.5 GB")
    assert "up to 5.5 GB of pip's downloads while it runs" in msg and "has 64 MiB free" in msg
    assert str(f["venv"]) not in msg.split(". Free")[0]  # the venv's disk is not the one named
    assert "TMPDIR=/path/on/it" in msg and "PIP_CACHE_DIR=" in msg and "SKIP_DISK_CHECK=1" in msg


def test_shares_on_one_filesystem_are_summed(disks):
    # 11 GB of environment + 5.5 GB in TMPDIR on one disk: 12 GB free is not enough (each alone would be)
    f = disks(venv=(1, 12 * GB), tmp=(1, 12 * GB), cache=(3, 100 * GB))
    rc, msg = _check(f)
    assert rc == 1 and "must hold 16.5 GB at the set-up's peak" in msg and "12.0 GB free" in msg
    assert "the environment: 11.0 GB more (11 GB in all)" in msg
    f = disks(venv=(1, 12 * GB), tmp=(2, 12 * GB), cache=(3, 100 * GB))
    assert _check(f) == (0, "")


def test_pips_cache_that_does_not_fit_is_only_a_warning(disks):
    f = disks(venv=(1, 100 * GB), tmp=(1, 100 * GB), cache=(2, 1 * GB))
    rc, msg = _check(f)
    assert rc == 0 and msg.startswith(f"warning: make test's environment may run out of disk: the filesystem "
                                      f"holding pip's cache ({f['cache']}) must hold 5.5 GB")
    assert _check(f, cache=False) == (0, "")  # PIP_NO_CACHE_DIR: no cache, nothing to warn about


def test_what_the_venv_and_the_cache_already_hold_is_not_needed_again(disks, monkeypatch):
    f = disks(venv=(1, 8 * GB), tmp=(2, 100 * GB), cache=(3, 2 * GB))
    assert _check(f)[0] == 1
    held = {f["venv"] / ".venv": 4 * GB, f["cache"]: 5 * GB}  # a partial set-up; a cache holding most wheels
    monkeypatch.setattr(check_disk, "_size", lambda p: held.get(Path(p), 0))
    assert _check(f) == (0, "")


def test_the_full_disk_message_names_the_filesystem_that_filled(disks, monkeypatch, capsys):
    f = disks(venv=(1, 200 * GB), tmp=(2, 64 * MiB), cache=(2, 60 * MiB))
    monkeypatch.setattr(check_disk.tempfile, "gettempdir", lambda: str(f["tmp"]))
    rc = check_disk.main([str(f["venv"] / ".venv"), "--full", "--installed-gb", "11", "--download-gb", "5.5",
                          "--pip-cache", str(f["cache"]), "--what", "pip install -r requirements.txt",
                          "--pip-error", "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"])
    err = capsys.readouterr().err
    assert rc == 0
    assert err.startswith("scripts/pip_install.sh: the disk is full (pip: No space left on device) in: "
                          f"pip install -r requirements.txt. It filled on the filesystem holding TMPDIR ({f['tmp']}) "
                          f"and pip's cache ({f['cache']}) (it cannot hold its share of the set-up's peak): 64 MiB free")
    assert f"elsewhere, the environment ({f['venv'] / '.venv'}): 200.0 GB free" in err


def test_a_path_in_pips_error_decides_which_filesystem_filled(disks):
    f = disks(venv=(1, 2 * GB), tmp=(2, 3 * GB), cache=(3, 100 * GB))
    fss = check_disk.filesystems(check_disk.places(f["venv"] / ".venv", 0, 0, f["cache"], tmpdir=f["tmp"]))
    fs, why = check_disk.filled(fss, f"OSError: [Errno 28] No space left on device: '{f['tmp']}/pip-unpack-x/torch.whl'")
    assert [p.role for p in fs.places] == ["TMPDIR"] and "names" in why
    fs, why = check_disk.filled(fss)  # no sizes, no path: the least free
    assert [p.role for p in fs.places] == ["the environment"]


def test_the_command_measures_the_real_disks_and_a_venv_not_made_yet(tmp_path):
    venv = tmp_path / "not" / "made" / ".venv"
    run = lambda gb, **env: subprocess.run(
        [sys.executable, str(SCRIPT), str(venv), "--installed-gb", str(gb), "--download-gb", "0",
         "--pip-cache", "none", "--what", "the test"], capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", **env})
    r = run(10**9)  # an exabyte: no disk has it
    assert r.returncode == 1 and f"the filesystem holding the environment ({venv})" in r.stderr, r.stderr
    assert run(10**9, SKIP_DISK_CHECK="1").returncode == 0
    r = run(0)
    assert r.returncode == 0 and r.stderr == ""
    assert not venv.exists()


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_the_command_sees_a_tmpdir_on_another_filesystem(tmp_path):
    shm = Path("/dev/shm")
    if os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the temporary folder")
    free = shutil.disk_usage(shm).free
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / ".venv"), "--installed-gb", "0", "--download-gb",
                        str(free / GB * 1.5), "--pip-cache", "none", "--what", "the test"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(shm)})
    assert r.returncode == 1 and f"the filesystem holding TMPDIR ({shm}) must hold" in r.stderr, r.stderr
    assert str(tmp_path) not in r.stderr.split(". Free")[0]
