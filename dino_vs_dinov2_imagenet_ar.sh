#!/usr/bin/env bash
# ImageNet subsets: DINO vs DINOv2, aligned representations (the paper's _ar variant).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/dino_vs_dinov2_imagenet_ar.yaml "$@"
