#!/usr/bin/env bash
# Install the LiteLLM proxy (`litellm[proxy]`) into its own virtualenv, for the tests marked
# `litellm` (tests/plugins/litellm.py). Prints the variable those tests read, ready for eval:
#
#   eval "$(.ci/litellm.sh)"     # TOOLCHAT_LITELLM_PYTHON=...
#
# The first run installs from wheels, no compiling (about 100 s, 750 MB); a second run finds
# the virtualenv in the cache and only checks it (a fraction of a second). TOOLCHAT_LITELLM_CACHE sets the cache folder (default:
# ~/.cache/toolchat-litellm). A change of LITELLM below is installed over the cached one.
set -euo pipefail

CACHE="${TOOLCHAT_LITELLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolchat-litellm}"
VENV="$CACHE/venv"
# 1.109 and later pin releases of litellm-proxy-extras (and 1.110 a litellm-proxy package)
# that the package index CI installs from did not have yet: raise the bound when it does.
LITELLM="litellm[proxy]>=1.108.7,<1.109"

# Importing litellm fetches a price list from the network unless told to use its own copy.
export LITELLM_LOCAL_MODEL_COST_MAP=True

mkdir -p "$CACHE"
# The check reads the installed packages' metadata (importing the proxy takes 10 s).
installed() {
    "$VENV/bin/python" -c "import importlib.metadata as m
for name in ('litellm', 'litellm-proxy-extras', 'fastapi', 'uvicorn', 'orjson'):
    m.version(name)" 2>/dev/null
}
if [ "$(cat "$CACHE/installed" 2>/dev/null)" != "$LITELLM" ] || ! installed; then
    echo "installing $LITELLM into $VENV" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$LITELLM" >&2
    "$VENV/bin/python" -c "import litellm.proxy.proxy_server" >&2
    echo "$LITELLM" >"$CACHE/installed"
fi
printf 'export TOOLCHAT_LITELLM_PYTHON=%q\n' "$VENV/bin/python"
