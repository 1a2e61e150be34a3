#!/usr/bin/env bash
# CUB: PCBM concept projections vs the same with one concept masked (the paper's CUB experiment).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/cub_pcbm.yaml "$@"
