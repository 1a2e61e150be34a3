#!/usr/bin/env bash
# The main job on an embedded default, no download from a model or data host:
# train one small ConvNet on Fashion-MNIST {pullover, coat, shirt} (Debian's package, real
# images), keep an early and the final checkpoint, extract both representations of 1500
# held-out images and explain how they differ (RDX, both directions, image grids).
# Falls back to scikit-learn's digits {3, 5, 8} when Fashion-MNIST is not available.
#
#   bash setup.sh && bash quickstart.sh        (a few minutes on 2 CPU cores)
#   QUICKSTART_EPOCHS=4 QUICKSTART_OUT=/tmp/q bash quickstart.sh     (faster, for tests)
#   RDX_PYTHON=python3 bash quickstart.sh      (an interpreter that already has rdx's needs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PY="${RDX_PYTHON:-.venv/bin/python}"
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "quickstart: $PY is missing; run: bash setup.sh (or set RDX_PYTHON)" >&2
    exit 2
fi
OUT="${QUICKSTART_OUT:-outputs}"
CKPT="${QUICKSTART_CHECKPOINTS:-checkpoints}"

if "$PY" -c "from rdx.data import get_dataset; get_dataset('fashion_mnist')" >/dev/null 2>&1; then
    preset=fashion_pcs; config=configs/quickstart_fashion.yaml
else
    echo "quickstart: Fashion-MNIST not found (apt-get install -y dataset-fashion-mnist); using digits"
    preset=digits; config=configs/quickstart_digits.yaml
fi

epochs=()
[ -n "${QUICKSTART_EPOCHS:-}" ] && epochs=(--epochs "$QUICKSTART_EPOCHS")
# the model and one seed twin (seed 1: the twin null of the config's significance block)
if [ -f "$CKPT/$preset/last.pt" ] && [ -f "$CKPT/${preset}_seed1/last.pt" ] \
   && [ -z "${QUICKSTART_EPOCHS:-}" ]; then
    echo "quickstart: using the checkpoints in $CKPT/$preset/ and $CKPT/${preset}_seed1/ (delete them to retrain)"
else
    echo "quickstart: training $preset and its seed twin (rdx train --twins 1)"
    "$PY" -m rdx train --preset "$preset" --twins 1 --out "$CKPT" "${epochs[@]}"
fi

# configs name checkpoints under checkpoints/; point them at $CKPT if it differs
if [ "$CKPT" != checkpoints ]; then
    tmpcfg="$(mktemp --suffix=.yaml)"
    sed "s#checkpoints/#$CKPT/#g" "$config" > "$tmpcfg"
    config="$tmpcfg"
fi
"$PY" -m rdx run --config "$config" --output-root "$OUT"
echo
echo "quickstart: open $OUT/quickstart_*/index.html in a browser (scores against chance, each"
echo "method's strongest explanation, links to the report and the explorer); raw results per"
echo "method in $OUT/quickstart_*/early_vs_final/<method>/"
echo "(explanations.json, grids/*.png); the scores table in $OUT/quickstart_*/analysis/summary.csv."
