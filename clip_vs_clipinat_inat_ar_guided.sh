#!/usr/bin/env bash
# iNaturalist subsets (gator, corvid, maple): CLIP vs CLIP-iNat, aligned representations,
# RDX guided by the probes' true/false-positive groups (tpfp), grids captioned
# with both models' predictions and the true class.
# Every dataset and model is checked first; extra arguments go to `rdx run`
# (e.g. --only NAME, --device cuda, --force, --check).
exec bash "$(dirname "${BASH_SOURCE[0]}")/scripts/run_experiment.sh" configs/clip_vs_clipinat_inat_ar_guided.yaml "$@"
