#!/usr/bin/env bash
# Download CUB-200-2011 and the concept-bottleneck split used by RDX's `cub_pcbm` dataset:
#
#   usage: bash download_cub.sh [-h|--help]
#
#   data/CUB_200_2011/images/<class folder>/<file>.jpg, classes.txt, ...
#   data/CUB_200_2011/class_attr_data_10/{train,val,test}.pkl
#
# 1. CUB_200_2011.tgz (1.1 GB) from the Caltech data repository (record 65de6-vp158);
# 2. class_attr_data_10.zip (the CBM authors' train/val/test split as pickled lists of
#    dicts) from the RDX authors' record chw9h-4bs90, unpacked into data/CUB_200_2011/.
# The features of configs/cub_pcbm.yaml (Post-hoc CBM concept projections of these images)
# come from `bash download_checkpoints.sh pcbm`.
#
# Resumable (a partial .part download continues), verified (archive integrity + the expected
# files, then the rdx loader reads every split), idempotent (verified content is not fetched
# again). Archives are removed after unpacking unless RDX_KEEP_ARCHIVES=1.
#
#   RDX_DATA_ROOT      data folder (default: data)
#   RDX_CUB_URL        URL of CUB_200_2011.tgz
#   RDX_CUB_SPLIT_URL  URL of class_attr_data_10.zip
#
# Already have CUB? `ln -s /datasets/CUB_200_2011 data/CUB_200_2011` and run this script:
# it only fetches what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, SCRIPT, no_arguments, say, fetch, fetch_zip, tgz_holds
no_arguments "$@"

DATA="${RDX_DATA_ROOT:-data}"
DEST="$DATA/CUB_200_2011"
TGZ_URL="${RDX_CUB_URL:-https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz?download=1}"
ZIP_URL="${RDX_CUB_SPLIT_URL:-https://data.caltech.edu/records/chw9h-4bs90/files/class_attr_data_10.zip?download=1}"


mkdir -p "$DATA"

# --- 1. images --------------------------------------------------------------------------
if [ -d "$DEST/images" ] && [ -f "$DEST/classes.txt" ]; then
    echo "[cub] $DEST/images and classes.txt present"
else
    ARC="$DATA/CUB_200_2011.tgz"
    MEMBER=CUB_200_2011/classes.txt
    have=1   # tgz_holds: 0 usable, 1 missing or incomplete, 2 a complete archive of something else
    if [ -f "$ARC" ]; then tgz_holds "$ARC" "$MEMBER" && have=0 || have=$?; fi
    if [ "$have" = 2 ]; then
        say "[cub] $ARC is a complete .tgz but holds no $MEMBER, so it is not the CUB archive;" \
            "removed it. Run \`$RERUN\` again to download the right one."
        rm -f "$ARC"; exit 1
    fi
    if [ "$have" = 1 ]; then
        echo "[cub] fetching $TGZ_URL"
        fetch cub "$TGZ_URL" "$ARC.part" RDX_CUB_URL || exit 1
        have=0
        tgz_holds "$ARC.part" "$MEMBER" || have=$?
        if [ "$have" != 0 ]; then
            # the transfer itself completed, so resuming cannot repair it
            what="not a valid .tgz archive ($(size_of "$ARC.part"); the server may have sent"
            what="$what an error page instead of the file)"
            [ "$have" = 2 ] && what="a .tgz without $MEMBER, so not the CUB archive"
            say "[cub] the download finished, but it is $what; removed it. Check RDX_CUB_URL" \
                "($TGZ_URL) and run \`$RERUN\` again."
            rm -f "$ARC.part"; exit 1
        fi
        mv "$ARC.part" "$ARC"
    fi
    echo "[cub] unpacking $ARC into $DATA/"
    tar -xzf "$ARC" -C "$DATA" CUB_200_2011
    [ "${RDX_KEEP_ARCHIVES:-0}" = 1 ] || rm -f "$ARC"
fi

# --- 2. CBM split -------------------------------------------------------------------------
SPLIT="$DEST/class_attr_data_10"
if [ -f "$SPLIT/train.pkl" ] && [ -f "$SPLIT/val.pkl" ] && [ -f "$SPLIT/test.pkl" ]; then
    echo "[cub] $SPLIT/{train,val,test}.pkl present"
else
    ARC="$DATA/class_attr_data_10.zip"
    fetch_zip cub "$ZIP_URL" "$ARC" RDX_CUB_SPLIT_URL || exit 1
    TMP="$DEST/.unpack.$$"
    rm -rf "$TMP"; mkdir -p "$TMP"
    "$PY" -m zipfile -e "$ARC" "$TMP"
    FOUND="$(find "$TMP" -name train.pkl -print -quit)"
    if [ -z "$FOUND" ] || [ ! -f "$(dirname "$FOUND")/val.pkl" ] || [ ! -f "$(dirname "$FOUND")/test.pkl" ]; then
        echo "[cub] $ARC does not hold train.pkl, val.pkl and test.pkl; removed, run again" >&2
        rm -rf "$TMP" "$ARC"; exit 1
    fi
    rm -rf "$SPLIT"
    mv "$(dirname "$FOUND")" "$SPLIT"
    rm -rf "$TMP"
    [ "${RDX_KEEP_ARCHIVES:-0}" = 1 ] || rm -f "$ARC"
fi

# --- 3. verify with the loader ------------------------------------------------------------
"$PY" - "$DEST" <<'PYEOF'
import sys
from rdx.data.cub import cub_dataset
for split in ("train", "val", "test"):
    ds = cub_dataset(split, root=sys.argv[1])
    missing = sum(not (ds.root / i).is_file() for i in ds.ids)
    if missing:
        sys.exit(f"[cub] {split}: {missing} of {len(ds)} images are missing under {ds.root}")
    print(f"[cub] {split}: {len(ds)} images, {len(set(ds.labels.tolist()))} classes, "
          f"in {ds.root}")
PYEOF
