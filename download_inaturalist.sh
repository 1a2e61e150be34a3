#!/usr/bin/env bash
# Download the RDX authors' iNaturalist subset (dataset `inatdl`) into data/inat_subset/:
#
#   data/inat_subset/data.json   file_paths, class_labels, class_names, train/test_indices
#   data/inat_subset/<file_paths[i]>
#
# Source: inat_subset.zip, Caltech data repository record chw9h-4bs90 (the RDX authors').
# Resumable (a partial .part download continues), verified (zip integrity, data.json parses,
# every file it lists exists), idempotent (a verified copy is not fetched again). The zip is
# removed after unpacking unless RDX_KEEP_ARCHIVES=1.
#
#   usage: bash download_inaturalist.sh [-h|--help]
#
#   RDX_DATA_ROOT   data folder (default: data)
#   RDX_INAT_URL    URL of inat_subset.zip
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, SCRIPT, no_arguments, fetch_zip
no_arguments "$@"

DATA="${RDX_DATA_ROOT:-data}"
DEST="$DATA/inat_subset"
URL="${RDX_INAT_URL:-https://data.caltech.edu/records/chw9h-4bs90/files/inat_subset.zip?download=1}"


verify() {  # folder: data.json parses and lists files that exist
    "$PY" - "$1" <<'PYEOF'
import sys
from pathlib import Path
from rdx.data.inat import inat_dataset
from rdx.errors import RDXInputError
try:
    for split in ("train", "test"):
        ds = inat_dataset(split, root=sys.argv[1])
        missing = [i for i in ds.ids if not (Path(ds.root) / i).is_file()]
        if missing:
            sys.exit(f"[inat] {split}: {len(missing)} of {len(ds)} files missing, "
                     f"e.g. {Path(ds.root) / missing[0]}")
        print(f"[inat] {split}: {len(ds)} images, {len(ds.class_names)} classes, in {ds.root}")
except RDXInputError as exc:
    sys.exit(f"[inat] {exc}")
PYEOF
}

mkdir -p "$DATA"
if [ -f "$DEST/data.json" ] && verify "$DEST" >/dev/null 2>&1; then
    echo "[inat] $DEST present and verified"
else
    ARC="$DATA/inat_subset.zip"
    fetch_zip inat "$URL" "$ARC" RDX_INAT_URL || exit 1
    TMP="$DATA/.inat_unpack.$$"
    rm -rf "$TMP"; mkdir -p "$TMP"
    "$PY" -m zipfile -e "$ARC" "$TMP"
    FOUND="$(find "$TMP" -name data.json -print -quit)"
    if [ -z "$FOUND" ]; then
        echo "[inat] $ARC holds no data.json; removed, run again" >&2
        rm -rf "$TMP" "$ARC"; exit 1
    fi
    rm -rf "$DEST"
    mv "$(dirname "$FOUND")" "$DEST"
    rm -rf "$TMP"
    [ "${RDX_KEEP_ARCHIVES:-0}" = 1 ] || rm -f "$ARC"
fi
verify "$DEST"
