#!/usr/bin/env bash
# The test command (README step 2; .ci/run calls it too).
# Creates or reuses a virtualenv, installs memstrata with its test extras, lints, type-checks and runs the whole suite,
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
# llama.cpp for the real-server tests, built once into our own wheel cache. A portable build (no -march=native):
# a native build can enable CPU features (AMX) that a VM advertises but cannot run, and the server then crashes.
LLAMA="llama-cpp-python==0.3.36"
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/memstrata/wheels"
if ! ls "$WHEELS"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
  echo "building $LLAMA (portable CPU build, about 5 minutes on 2 cores)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
    $PIP wheel --quiet --no-cache-dir --no-deps -w "$WHEELS" "$LLAMA"
fi
$PIP install --quiet --disable-pip-version-check "$WHEELS"/llama_cpp_python-0.3.36-*.whl
# the library with its test extras, and the benchmark distribution beside it (benchmarks/: `memstrata bench`)
$PIP install --quiet --disable-pip-version-check -e ".[dev,llm-tests]" -e ./benchmarks
# Lint and type check before the tests (both configured in pyproject.toml; mypy checks memstrata/, its `packages`).
# `|| exit 1`: set -e does not stop at a failed left side of &&.
"$VENV/bin/ruff" check . && "$VENV/bin/ruff" format --check . || exit 1
"$VENV/bin/mypy" || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false ANONYMIZED_TELEMETRY=False
exec "$VENV/bin/python" -m pytest -q "$@"
