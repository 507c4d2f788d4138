#!/usr/bin/env bash
# Runs one tests/hf file with the Python of `make test-hf` (FITSUM_HF_PYTHON); exit 77 (CTest: skipped) without it.
set -euo pipefail
if [[ -z "${FITSUM_HF_PYTHON:-}" ]]; then
  echo "FITSUM_HF_PYTHON is not set: run these tests with make test-hf" >&2
  exit 77
fi
cd "$(dirname "$1")"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
exec "$FITSUM_HF_PYTHON" -m pytest -v -p no:cacheprovider -W ignore::DeprecationWarning "$1"
