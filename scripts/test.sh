#!/usr/bin/env bash
# The test command (README step 2; .ci/run calls it too).
# Creates or reuses a virtualenv, installs memstrata with its test extras, and runs the whole suite,
# including the real llama.cpp server tests and the LoCoMo integration tests (../shared must sit beside the repo).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MEMSTRATA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memstrata/venv-$(python3 -c 'import sys;print("py%d%d"%sys.version_info[:2])')}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
# torch first, pinned: the CPU wheel of 2.13.0 is on hand; anything else pulls CUDA builds.
$PIP install --quiet --disable-pip-version-check "torch==2.13.0"
$PIP install --quiet --disable-pip-version-check -e ".[dev,llm-tests]"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false ANONYMIZED_TELEMETRY=False
exec "$VENV/bin/python" -m pytest -q "$@"
