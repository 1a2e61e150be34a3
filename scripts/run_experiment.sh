#!/usr/bin/env bash
# Shared body of the top-level experiment scripts: run one config with the project's venv.
# `rdx run` validates the config and checks every dataset/checkpoint first; anything missing
# is listed with the command that fetches or trains it, and nothing runs.
#   usage: bash scripts/run_experiment.sh configs/X.yaml [--only NAME] [--device cuda] ...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${RDX_PYTHON:-.venv/bin/python}"
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "$PY is missing; run: bash setup.sh (or set RDX_PYTHON)" >&2
    exit 2
fi
config="$1"; shift
exec "$PY" -m rdx run --config "$config" "$@"
