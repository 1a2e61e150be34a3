#!/usr/bin/env bash
# Download the RDX authors' trained model checkpoints into checkpoints/:
#
#   checkpoints/mnist_*/last.ckpt        the MNIST models (one folder per modification)
#   checkpoints/mnist_835/*.ckpt         the checkpoints of the 3/5 training run
#
# Source: checkpoints.zip, Caltech data repository record chw9h-4bs90 (the RDX authors').
# Resumable (a partial .part download continues), verified (zip integrity + the expected
# files), idempotent (a verified copy is not fetched again). The zip is removed after
# unpacking unless RDX_KEEP_ARCHIVES=1.
#
#   RDX_CHECKPOINT_ROOT   destination (default: checkpoints)
#   RDX_CHECKPOINTS_URL   URL of checkpoints.zip
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, fetch, fetch_zip

DEST="${RDX_CHECKPOINT_ROOT:-checkpoints}"
URL="${RDX_CHECKPOINTS_URL:-https://data.caltech.edu/records/chw9h-4bs90/files/checkpoints.zip?download=1}"


complete() {  # folder: the expected checkpoint files are there
    compgen -G "$1/mnist_*/last.ckpt" >/dev/null && compgen -G "$1/mnist_835/*.ckpt" >/dev/null
}

if [ -d "$DEST" ] && complete "$DEST"; then
    echo "[checkpoints] $DEST present and verified"
else
    PARENT="$(dirname "$DEST")"
    mkdir -p "$PARENT"
    ARC="$PARENT/checkpoints.zip"
    fetch_zip checkpoints "$URL" "$ARC" || exit 1
    TMP="$PARENT/.checkpoints_unpack.$$"
    rm -rf "$TMP"; mkdir -p "$TMP"
    "$PY" -m zipfile -e "$ARC" "$TMP"
    # the zip may hold checkpoints/mnist_*/... or mnist_*/... directly
    FOUND="$(find "$TMP" -path '*/mnist_835' -type d -print -quit)"
    if [ -z "$FOUND" ] || ! complete "$(dirname "$FOUND")"; then
        echo "[checkpoints] $ARC lacks mnist_*/last.ckpt or mnist_835/*.ckpt; removed, run again" >&2
        rm -rf "$TMP" "$ARC"; exit 1
    fi
    mkdir -p "$DEST"
    for d in "$(dirname "$FOUND")"/*; do   # merge: keep checkpoints the user trained
        rm -rf "${DEST:?}/$(basename "$d")"
        mv "$d" "$DEST/"
    done
    rm -rf "$TMP"
    [ "${RDX_KEEP_ARCHIVES:-0}" = 1 ] || rm -f "$ARC"
fi
echo "[checkpoints] in $DEST:"
for f in "$DEST"/mnist_*/last.ckpt "$DEST"/mnist_835/*.ckpt; do
    echo "  $f"
done | sort -u
