#!/usr/bin/env bash
# iNaturalist subsets: CLIP vs CLIP fine-tuned on iNat (the paper's iNaturalist experiment).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/clip_vs_clipinat.yaml "$@"
