#!/usr/bin/env bash
# MNIST modification experiments, k = 3: merged labels (m35, m49) and flips (as in the paper).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/mnist_modifications.yaml "$@"
