#!/usr/bin/env bash
# iNaturalist subsets: CLIP vs CLIP-iNat, aligned representations (the paper's _ar variant).
# Extra arguments go to `rdx run` (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/clip_vs_clipinat_ar.yaml "$@"
