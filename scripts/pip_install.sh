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
# machines it keeps none, and they are downloaded again). Only network failures are
# tried again (the markers below); a resolver or build error fails at once, as plain pip would.
# A full disk is not tried again either: it ends with where the space went and what to do (a CI run
# failed so after 146 s; scripts/check_disk.py checks before a set-up starts).
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
for ((i = 1; i <= tries; i++)); do
    "$py" -m pip install "${resume[@]}" --timeout 60 "$@" 2>"$log"
    rc=$?
    cat "$log" >&2
    [ $rc -eq 0 ] && exit 0
    if grep -qiE 'No space left on device|Errno 28|Disk quota exceeded' "$log"; then
        venv=$(dirname "$(dirname "$py")")
        free=$(df -Ph "$venv" 2>/dev/null | awk 'NR == 2 {print $4}')
        cache=$("$py" -m pip cache dir 2>/dev/null)
        held=$( [ -n "$cache" ] && [ -d "$cache" ] && du -sh "$cache" 2>/dev/null | cut -f1)
        echo "scripts/pip_install.sh: the disk is full (pip: No space left on device) in: pip install $*." \
            "The disk holding $venv has ${free:-?} free; pip's cache ($cache) holds ${held:-nothing}." \
            "Free some space ($py -m pip cache purge empties pip's cache), or make the environment on a bigger disk" \
            "(VENV=/path/on/it for make submission and make test, KAGGLE_VENV= for the twin), then run the same make command again." >&2
        exit $rc
    fi
    if ! grep -qiE 'incomplete-download|connection (was )?(interrupted|reset|aborted|broken)|read timed out|ConnectTimeout|NewConnectionError|ProtocolError|RemoteDisconnected|IncompleteRead|Temporary failure in name resolution|HTTP error 50[0-9]|network connectivity' "$log"; then
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
