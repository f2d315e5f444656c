#!/usr/bin/env bash
# Install Open WebUI (`open-webui` from PyPI) into its own virtualenv, for the tests marked
# `openwebui` (tests/plugins/openwebui.py). Prints the variable those tests read, ready for eval:
#
#   eval "$(.ci/openwebui.sh)"     # TOOLCHAT_OPENWEBUI_PYTHON=...
#
# The first run installs from wheels (about 8 minutes, a few GB with its torch); a second run
# finds the virtualenv in the cache and only checks it (a fraction of a second).
# TOOLCHAT_OPENWEBUI_CACHE sets the cache folder (default: ~/.cache/toolchat-openwebui). A
# change of OPENWEBUI below is installed over the cached one.
set -euo pipefail

CACHE="${TOOLCHAT_OPENWEBUI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolchat-openwebui}"
VENV="$CACHE/venv"
OPENWEBUI="open-webui==0.12.4"
# Open WebUI supports Python 3.11 and 3.12; the first of these found makes the virtualenv.
PYTHON="${TOOLCHAT_OPENWEBUI_BASE_PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3.12 python3; do
        if command -v "$candidate" >/dev/null && "$candidate" -c 1 2>/dev/null; then
            PYTHON="$candidate"
            break
        fi
    done
fi

mkdir -p "$CACHE"
# The check reads the installed package's metadata (importing Open WebUI takes many seconds).
installed() {
    "$VENV/bin/python" -c "import importlib.metadata as m
m.version('open-webui')" 2>/dev/null
}
if [ "$(cat "$CACHE/installed" 2>/dev/null)" != "$OPENWEBUI" ] || ! installed; then
    echo "installing $OPENWEBUI into $VENV" >&2
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$OPENWEBUI" >&2
    echo "$OPENWEBUI" >"$CACHE/installed"
fi
printf 'export TOOLCHAT_OPENWEBUI_PYTHON=%q\n' "$VENV/bin/python"
