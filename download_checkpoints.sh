#!/usr/bin/env bash
# Download the RDX authors' trained models and precomputed features into checkpoints/.
#
#   usage: bash download_checkpoints.sh [mnist] [pcbm] [-h|--help]
#
#   mnist   checkpoints/mnist_*/last.ckpt      the MNIST models (one folder per modification)
#           checkpoints/mnist_835/*.ckpt       the checkpoints of the 3/5 training run
#   pcbm    checkpoints/post-hoc-cbm/output/cub_resnet18/
#               train-proj_cub__resnet18_cub__cub_resnet18_cub_0.npy
#           Post-hoc CBM concept projections of the CUB train images: the features that
#           configs/cub_pcbm.yaml compares (its images come from `bash download_cub.sh`)
#   (none)  mnist, and pcbm too when the archive holds it
#
# Source: checkpoints.zip, Caltech data repository record chw9h-4bs90 (the RDX authors'),
# expected to hold post-hoc-cbm/ too (the authors' configs read the projection from there).
# Should it lack the projection, `pcbm` says how to make it with Post-hoc CBM; RDX_PCBM_URL
# fetches the .npy from elsewhere instead.
# Resumable (a partial .part download continues), verified (zip integrity + the expected
# files; the projection must read as a 2-D numeric array), idempotent (verified parts are
# neither fetched nor replaced again). The zip is removed after unpacking unless
# RDX_KEEP_ARCHIVES=1.
#
#   RDX_CHECKPOINT_ROOT   destination (default: checkpoints)
#   RDX_CHECKPOINTS_URL   URL of checkpoints.zip
#   RDX_PCBM_URL          URL of the projection .npy itself (used for pcbm instead of the zip)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, SCRIPT, usage, bad_usage, say, fetch, fetch_zip

want_mnist=0
want_pcbm=0
for a in "$@"; do
    case "$a" in -h|--help) usage; exit 0 ;; esac
done
for a in "$@"; do
    case "$a" in
        mnist) want_mnist=1 ;;
        pcbm) want_pcbm=1 ;;
        -*) bad_usage "unknown option '$a'" ;;
        *) bad_usage "unknown part '$a' (the parts are: mnist, pcbm)" ;;
    esac
done
optional_pcbm=0
if [ $# -eq 0 ]; then want_mnist=1; optional_pcbm=1; fi

DEST="${RDX_CHECKPOINT_ROOT:-checkpoints}"
URL="${RDX_CHECKPOINTS_URL:-https://data.caltech.edu/records/chw9h-4bs90/files/checkpoints.zip?download=1}"
PCBM=post-hoc-cbm/output/cub_resnet18/train-proj_cub__resnet18_cub__cub_resnet18_cub_0.npy


mnist_complete() {  # folder: the expected checkpoint files are there
    compgen -G "$1/mnist_*/last.ckpt" >/dev/null && compgen -G "$1/mnist_835/*.ckpt" >/dev/null
}

pcbm_shape() {  # file: prints "N images x D concepts" when it reads as a 2-D numeric array
    [ -f "$1" ] || return 1
    "$PY" - "$1" <<'PYEOF'
import sys
import numpy as np
try:
    a = np.load(sys.argv[1], mmap_mode="r", allow_pickle=False)
except Exception as exc:  # any unreadable file is "not there"
    sys.exit(f"{sys.argv[1]}: {exc}")
if not isinstance(a, np.ndarray) or a.ndim != 2 or a.dtype.kind not in "fiu":
    sys.exit(f"{sys.argv[1]}: not a 2-D numeric array")
print(f"{a.shape[0]} images x {a.shape[1]} concepts ({a.dtype})")
PYEOF
}

pcbm_recipe() {
    say "[checkpoints] $1 Set RDX_PCBM_URL to a copy of the file, or make it with Post-hoc CBM" \
        "(https://github.com/mertyg/post-hoc-cbm): \`python learn_concepts_dataset.py" \
        "--dataset-name cub --backbone-name resnet18_cub --C 0.1 --n-samples 100 --out-dir" \
        "BANKS\`, then \`python train_pcbm.py --concept-bank BANKS/cub_resnet18_cub_0.1_100.pkl" \
        "--dataset cub --backbone-name resnet18_cub --out-dir" \
        "$DEST/post-hoc-cbm/output/cub_resnet18\`. rdx reads its rows as the images of" \
        "data/CUB_200_2011/class_attr_data_10/train.pkl, in that order."
}

had_mnist=0; mnist_complete "$DEST" && had_mnist=1
had_pcbm=0; pcbm_shape "$DEST/$PCBM" >/dev/null 2>&1 && had_pcbm=1

# --- the projection from RDX_PCBM_URL ---------------------------------------------------------
if [ "$want_pcbm" = 1 ] && [ "$had_pcbm" = 0 ] && [ -n "${RDX_PCBM_URL:-}" ]; then
    mkdir -p "$(dirname "$DEST/$PCBM")"
    echo "[checkpoints] fetching $RDX_PCBM_URL"
    fetch checkpoints "$RDX_PCBM_URL" "$DEST/$PCBM.part" RDX_PCBM_URL || exit 1
    if ! why="$(pcbm_shape "$DEST/$PCBM.part" 2>&1)"; then
        say "[checkpoints] the download finished, but it is not a 2-D numeric .npy array" \
            "(${why##*: }); removed it. Check RDX_PCBM_URL ($RDX_PCBM_URL) and run" \
            "\`$RERUN\` again."
        rm -f "$DEST/$PCBM.part"; exit 1
    fi
    mv "$DEST/$PCBM.part" "$DEST/$PCBM"
    had_pcbm=1
fi

# --- checkpoints.zip --------------------------------------------------------------------------
if { [ "$want_mnist" = 1 ] && [ "$had_mnist" = 0 ]; } ||
   { [ "$want_pcbm" = 1 ] && [ "$had_pcbm" = 0 ]; }; then
    PARENT="$(dirname "$DEST")"
    mkdir -p "$PARENT"
    ARC="$PARENT/checkpoints.zip"
    fetch_zip checkpoints "$URL" "$ARC" RDX_CHECKPOINTS_URL || exit 1
    TMP="$PARENT/.checkpoints_unpack.$$"
    rm -rf "$TMP"; mkdir -p "$TMP"
    trap 'rm -rf "$TMP"' EXIT
    "$PY" -m zipfile -e "$ARC" "$TMP"
    # the zip may hold checkpoints/<part>/... or <part>/... directly
    FOUND="$(find "$TMP" \( -path '*/mnist_835' -o -path '*/post-hoc-cbm' \) -type d -print -quit)"
    ROOT="$(dirname "${FOUND:-$TMP/none}")"
    if [ "$want_mnist" = 1 ] && [ "$had_mnist" = 0 ] &&
       { [ -z "$FOUND" ] || ! mnist_complete "$ROOT"; }; then
        say "[checkpoints] $ARC lacks mnist_*/last.ckpt or mnist_835/*.ckpt; removed it." \
            "Check RDX_CHECKPOINTS_URL ($URL) and run \`$RERUN\` again."
        rm -f "$ARC"; exit 1
    fi
    mkdir -p "$DEST"
    if [ -n "$FOUND" ]; then
        for d in "$ROOT"/*; do   # merge: keep what the user trained and what is verified
            name="$(basename "$d")"
            case "$name" in
                mnist_*) [ "$had_mnist" = 1 ] && [ -e "$DEST/$name" ] && continue ;;
                post-hoc-cbm) [ "$had_pcbm" = 1 ] && continue ;;
            esac
            rm -rf "${DEST:?}/$name"
            mv "$d" "$DEST/"
        done
    fi
    [ "${RDX_KEEP_ARCHIVES:-0}" = 1 ] || rm -f "$ARC"
fi

# --- what is there ----------------------------------------------------------------------------
status=0
if [ "$want_mnist" = 1 ]; then
    if [ "$had_mnist" = 1 ]; then
        echo "[checkpoints] MNIST models in $DEST present and verified:"
    else
        echo "[checkpoints] MNIST models in $DEST:"
    fi
    for f in "$DEST"/mnist_*/last.ckpt "$DEST"/mnist_835/*.ckpt; do
        echo "  $f"
    done | sort -u
fi
if shape="$(pcbm_shape "$DEST/$PCBM" 2>/dev/null)"; then
    echo "[checkpoints] CUB PCBM projection: $DEST/$PCBM ($shape)"
elif [ "$want_pcbm" = 1 ]; then
    pcbm_recipe "checkpoints.zip holds no valid $PCBM."
    status=1
elif [ "$optional_pcbm" = 1 ]; then
    echo "[checkpoints] no CUB PCBM projection in $DEST (configs/cub_pcbm.yaml needs it):" \
         "\`bash $SCRIPT pcbm\` fetches it or says how to make it"
fi
exit "$status"
