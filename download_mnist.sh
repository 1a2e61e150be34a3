#!/usr/bin/env bash
# Download MNIST's IDX files into data/mnist_data/MNIST/raw/ (the layout the original RDX
# code and rdx.data use). Resumable (partial files continue), verified (MD5 of the published
# files + a structural check of every file), idempotent (verified files are not fetched again).
#
#   usage: bash download_mnist.sh [-h|--help]
#
#   RDX_DATA_ROOT   data folder (default: data)
#   RDX_MNIST_URL   mirror holding the four .gz files (default: the mirror torchvision uses)
#   RDX_SKIP_MD5=1  skip the MD5 check (for a private mirror with re-compressed files)
#
# The RDX authors also publish their copy (mnist_data.zip, Caltech data repository record
# chw9h-4bs90); the files are the standard MNIST ones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, SCRIPT, no_arguments, say, fetch
no_arguments "$@"

DEST="${RDX_DATA_ROOT:-data}/mnist_data/MNIST/raw"
BASE="${RDX_MNIST_URL:-https://ossci-datasets.s3.amazonaws.com/mnist}"
declare -A MD5=(
    [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
    [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
    [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
    [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
)


md5_ok() {  # file name
    [ "${RDX_SKIP_MD5:-0}" = 1 ] && return 0
    [ "$(md5sum "$1" | cut -d' ' -f1)" = "${MD5[$2]}" ]
}

mkdir -p "$DEST"
for f in "${!MD5[@]}"; do
    if [ -f "$DEST/$f" ] && md5_ok "$DEST/$f" "$f"; then
        echo "[mnist] $DEST/$f present and verified"
        continue
    fi
    echo "[mnist] fetching $BASE/$f"
    fetch mnist "$BASE/$f" "$DEST/$f.part" RDX_MNIST_URL || exit 1
    if ! md5_ok "$DEST/$f.part" "$f"; then
        # the transfer completed, so resuming cannot repair it
        say "[mnist] the download of $f finished, but its MD5 is not the published one" \
            "(${MD5[$f]}; the server may have sent an error page, or the mirror re-compressed" \
            "the files: then set RDX_SKIP_MD5=1); removed it. Run \`$RERUN\` again."
        rm -f "$DEST/$f.part"
        exit 1
    fi
    mv "$DEST/$f.part" "$DEST/$f"
done

"$PY" - "$DEST" <<'PYEOF'
import sys
from rdx.data.mnist import load_mnist_arrays
for split in ("train", "test"):
    images, labels, folder = load_mnist_arrays("mnist", split, root=sys.argv[1])
    print(f"[mnist] {split}: {images.shape[0]} images of {images.shape[1]}x{images.shape[2]}, "
          f"{len(set(labels.tolist()))} classes, in {folder}")
PYEOF
