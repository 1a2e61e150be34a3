#!/usr/bin/env bash
# ImageNet subsets: DINO vs DINOv2 (the paper's ImageNet experiment).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/dino_vs_dinov2_imagenet.yaml "$@"
