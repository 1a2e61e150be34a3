#!/usr/bin/env bash
# MNIST-835 (as in the paper): strong (early) vs expert (final) checkpoint of one ConvNet on
# digits 8/3/5.
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/mnist_835.yaml "$@"
