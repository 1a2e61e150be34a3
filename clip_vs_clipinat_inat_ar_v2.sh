#!/usr/bin/env bash
# iNaturalist subsets (gator, corvid, maple): CLIP vs CLIP-iNat, aligned representations,
# RDX v2 (symmetrised ranks, clusters filtered at mean affinity 1.1).
# Every dataset and model is checked first; extra arguments go to `rdx run`
# (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/clip_vs_clipinat_inat_ar_v2.yaml "$@"
