"""scripts/check_disk.py: a set-up that cannot fit on the disk stops before it starts, saying how
much it needs and has (a CI run's set-up ended after 146 s with pip's "[Errno 28] No space left on
device"); one that fits only if pip's cache already holds the wheels is warned about, not refused."""
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_disk.py"
spec = importlib.util.spec_from_file_location("check_disk", SCRIPT)
check_disk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_disk)
GB = 1024**3


def test_too_little_disk_for_the_installed_environment_is_an_error_with_both_sizes():
    rc, msg = check_disk.verdict(free=8 * GB, held=0, installed_gb=11, download_gb=5,
                                 what="make test's environment", where=".venv")
    assert rc == 1
    assert msg.startswith("error: not enough disk for make test's environment: .venv will take 11.0 GB more")
    assert "8.0 GB free" in msg and "VENV=" in msg and "SKIP_DISK_CHECK=1" in msg


def test_what_a_partial_environment_already_holds_is_not_needed_again():
    rc, msg = check_disk.verdict(free=8 * GB, held=4 * GB, installed_gb=11, download_gb=5,
                                 what="w", where=".venv")
    assert rc == 0 and msg.startswith("warning: w may run out of disk: .venv will take 7.0 GB more")


def test_room_for_the_environment_but_not_the_downloads_is_only_a_warning():
    rc, msg = check_disk.verdict(free=12 * GB, held=0, installed_gb=11, download_gb=5, what="w", where="v")
    assert rc == 0 and "up to 5 GB" in msg and "12.0 GB free" in msg


def test_room_for_both_says_nothing():
    assert check_disk.verdict(free=17 * GB, held=0, installed_gb=11, download_gb=5, what="w", where="v") == (0, "")


def test_the_command_measures_the_real_disk_and_a_venv_not_made_yet(tmp_path):
    venv = tmp_path / "not" / "made" / ".venv"
    run = lambda gb, **env: subprocess.run(
        [sys.executable, str(SCRIPT), str(venv), "--installed-gb", str(gb), "--download-gb", "0",
         "--what", "the test"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})
    r = run(10**9)  # an exabyte: no disk has it
    assert r.returncode == 1 and f"{venv} will take" in r.stderr, r.stderr
    assert run(10**9, SKIP_DISK_CHECK="1").returncode == 0
    r = run(0)
    assert r.returncode == 0 and r.stderr == ""
    assert not venv.exists()
