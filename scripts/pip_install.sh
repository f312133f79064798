#!/usr/bin/env bash
# pip install, tried again when the network breaks off a download.
#
#   scripts/pip_install.sh PYTHON [pip install arguments...]
#
# Why: a fresh machine downloads several GB (torch with its CUDA libraries, two TensorFlow wheels of
# about 250 and 570 MB in the Kaggle twin). pip resumes a broken download only within one run
# (`--resume-retries`, pip >= 25.1) and gives up when the server stops sending; a CI run failed so
# ("error: incomplete-download ... 110.1 MB/572.6 MB" after 6 attempts). A later pip run starts a
# new connection; wheels already downloaded come from pip's cache where pip keeps one (on some
# machines it keeps none, and they are downloaded again).
# What to do is decided on pip's final error only (final_error below: from pip's last "ERROR:" or
# "error:" line to the end of its output), never on a marker anywhere in the log: pip prints
# "WARNING: Retrying ... Read timed out" while it retries on its own, and a run that then ends in
# "No matching distribution found" is a resolver error (a run was tried 4 times, about 5 minutes of
# waits, and called a network failure so). Only a network final error is tried again (the markers
# below); a resolver or build error fails at once, as plain pip would. A full disk is not tried
# again either: it ends with which filesystem could not hold its share and what to do
# (scripts/check_disk.py --full: the venv's, TMPDIR's, pip's cache's; a CI run failed so after
# 146 s; the same script checks before a set-up starts).
# Tries: PIP_INSTALL_TRIES (default 4), waiting PIP_INSTALL_WAITS seconds between them (default
# "30 90 180", the last repeated).
set -uo pipefail
py=${1:?usage: scripts/pip_install.sh PYTHON [pip install arguments...]}
shift
tries=${PIP_INSTALL_TRIES:-4}
resume=()
if "$py" -m pip install --help 2>/dev/null | grep -q -- '--resume-retries'; then
    resume=(--resume-retries 20)
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
read -r -a waits <<< "${PIP_INSTALL_WAITS:-30 90 180}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# what a network failure says (matched in pip's final error only)
network='incomplete-download|connection (was )?(interrupted|reset|aborted|broken)|read timed out|ConnectTimeout|NewConnectionError|ProtocolError|RemoteDisconnected|IncompleteRead|Temporary failure in name resolution|HTTP error 50[0-9]|network connectivity'

# pip's final error: from its last line starting "ERROR:" or "error:" (pip's two error forms) to the
# end; the last non-blank line when there is none (pip killed, a bare traceback).
final_error() {
    awk '/^(ERROR|error):/ {buf = ""; on = 1} on {buf = buf $0 "\n"} NF {last = $0}
         END {if (on) printf "%s", buf; else print last}' "$1"
}

for ((i = 1; i <= tries; i++)); do
    "$py" -m pip install "${resume[@]}" --timeout 60 "$@" 2>"$log"
    rc=$?
    cat "$log" >&2
    [ $rc -eq 0 ] && exit 0
    final=$(final_error "$log")
    if grep -qiE 'No space left on device|Errno 28|Disk quota exceeded' <<< "$final"; then
        venv=$(dirname "$(dirname "$py")")
        cache=$("$py" -m pip cache dir 2>/dev/null)
        # DISK_NEED: the set-up's sizes (--installed-gb N --download-gb M), which the Makefile exports
        # shellcheck disable=SC2086
        "${CHECK_DISK_PYTHON:-python3}" "$here/check_disk.py" "$venv" --full --pip-cache "${cache:-none}" \
            ${DISK_NEED:-} --pip-error "$final" --what "pip install $*" >&2 ||
            echo "scripts/pip_install.sh: the disk is full (pip: No space left on device) in: pip install $*." >&2
        exit $rc
    fi
    if ! grep -qiE "$network" <<< "$final"; then
        if grep -qiE "$network" "$log"; then
            echo "scripts/pip_install.sh: not tried again: pip's final error ($(head -n 1 <<< "$final")) is not a" \
                "network failure; the network warnings before it were pip's own retries, which succeeded or were given up" >&2
        fi
        exit $rc
    fi
    if ((i < tries)); then
        w=${waits[i - 1]:-${waits[-1]}}
        echo "scripts/pip_install.sh: the network broke off a download (try $i of $tries); trying again in ${w} s: pip install $*" >&2
        sleep "$w"
    fi
done
echo "scripts/pip_install.sh: pip install failed $tries times on the network: pip install $*." \
    "Check the connection to the package index, then run the same make command again (finished downloads are in pip's cache, where pip keeps one)." >&2
exit $rc
