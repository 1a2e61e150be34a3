#!/usr/bin/env bash
# Organise ImageNet (ILSVRC2012) into data/imagenet/{train,val}/<wnid>/*.JPEG. ImageNet needs
# a login (https://image-net.org/download-images), so this script downloads nothing: it
# checks and organises what you downloaded, and says what is missing.
#
#   usage: bash download_imagenet.sh [FILES...]
#              organise tarballs (default: look for them in data/imagenet/)
#          bash download_imagenet.sh --link /path/to/imagenet [FILES...]
#              symlink an existing copy that has train/<wnid>/ and val/<wnid>/ folders
#          bash download_imagenet.sh -h|--help
#              this text
#
# FILES (any order; found by name in data/imagenet/ when not given):
#   ILSVRC2012_img_train.tar       1000 per-class tars, unpacked into train/<wnid>/ in one
#                                  streaming pass (no second copy on disk)
#   ILSVRC2012_img_val.tar         50 000 flat JPEGs, sorted into val/<wnid>/ using
#   ILSVRC2012_devkit_t12.tar.gz   the devkit's ground truth + meta.mat (needs scipy), or
#   LOC_val_solution.csv           the Kaggle ground truth (with LOC_synset_mapping.txt)
# Flat val JPEGs already unpacked in val/ are sorted the same way (no valprep.sh needed).
# The known-corrupt training file n04266014_10835.JPEG is deleted. The class list is written
# to data/imagenet/LOC_synset_mapping.txt (sorted wnids = labels 0-999) when missing.
# Resumable: class folders are finished atomically and skipped on the next run; idempotent.
# Exit status 0 when train/ and val/ are complete, 1 otherwise (with what to do).
#
#   RDX_DATA_ROOT   data folder (default: data)
set -euo pipefail
CALLER_DIR="$PWD"   # relative FILES and --link paths are relative to where the user is
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/download_lib.sh   # PY, SCRIPT, usage, bad_usage, say

for a in "$@"; do
    case "$a" in -h|--help) usage; exit 0 ;; esac
done
absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s' "$CALLER_DIR/$1" ;; esac; }
LINK=""
FILES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --link)
            if [ $# -lt 2 ] || [ -z "$2" ]; then
                bad_usage "--link needs the folder of an existing copy"
            fi
            LINK="$(absolute "$2")"; shift 2 ;;
        -*) bad_usage "unknown option '$1'" ;;
        *) FILES+=("$(absolute "$1")"); shift ;;
    esac
done

DATA="${RDX_DATA_ROOT:-data}"
DEST="$DATA/imagenet"

if [ -n "$LINK" ]; then
    if [ ! -d "$LINK" ]; then
        say "[imagenet] --link $LINK: no such folder (give the folder that holds train/ and val/)."
        exit 2
    fi
    SRC="$(cd "$LINK" && pwd)"
    if [ ! -d "$SRC/train" ] && [ ! -d "$SRC/val" ]; then
        echo "[imagenet] $SRC has neither train/ nor val/ (expected <split>/<wnid>/*.JPEG)" >&2
        exit 1
    fi
    mkdir -p "$DATA"
    if [ -L "$DEST" ] && [ "$(readlink -f "$DEST")" = "$(readlink -f "$SRC")" ]; then
        echo "[imagenet] $DEST already links to $SRC"
    elif [ -e "$DEST" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
        echo "[imagenet] $DEST exists and is not empty; move it away first" >&2
        exit 1
    else
        rm -rf "$DEST"
        ln -s "$SRC" "$DEST"
        echo "[imagenet] linked $DEST -> $SRC"
    fi
fi

mkdir -p "$DEST"
"$PY" - "$DEST" ${FILES[@]+"${FILES[@]}"} <<'PYEOF'
import csv, io, os, re, shutil, sys, tarfile
from pathlib import Path

dest, args = Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]
CORRUPT = "n04266014_10835.JPEG"
VAL_RE = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG$")


def find(name):
    for a in args:
        if a.name == name:
            if not a.is_file():
                sys.exit(f"[imagenet] {a} not found")
            return a
    return dest / name if (dest / name).is_file() else None


def extract_all(tar, where):
    if hasattr(tarfile, "data_filter"):
        tar.extractall(where, filter="data")
    else:
        tar.extractall(where)


# --- class list (wnids sorted = labels 0-999) and val ground truth -----------------------
mapping = dest / "LOC_synset_mapping.txt"
devkit, loc_csv = find("ILSVRC2012_devkit_t12.tar.gz"), find("LOC_val_solution.csv")
if find("LOC_synset_mapping.txt") and not mapping.is_file():
    shutil.copy(find("LOC_synset_mapping.txt"), mapping)
val_truth = {}   # file name -> wnid
if devkit:
    from scipy.io import loadmat
    with tarfile.open(devkit) as t:
        meta = loadmat(io.BytesIO(t.extractfile("ILSVRC2012_devkit_t12/data/meta.mat").read()),
                       squeeze_me=True)["synsets"]
        gt = t.extractfile("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt"
                           ).read().decode().split()
    id_to_wnid = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in meta}
    val_truth = {f"ILSVRC2012_val_{i + 1:08d}.JPEG": id_to_wnid[int(k)] for i, k in enumerate(gt)}
    if not mapping.is_file():
        leaves = sorted((str(s["WNID"]), str(s["words"])) for s in meta
                        if int(s["num_children"]) == 0)
        mapping.write_text("".join(f"{w} {n}\n" for w, n in leaves))
        print(f"[imagenet] wrote {mapping} from the devkit")
elif loc_csv:
    with open(loc_csv) as f:
        for row in csv.DictReader(f):
            val_truth[row["ImageId"] + ".JPEG"] = row["PredictionString"].split()[0]
wnids = ([line.split()[0] for line in mapping.read_text().splitlines() if line.strip()]
         if mapping.is_file() else None)


# --- train ----------------------------------------------------------------------------------
train = dest / "train"
train_tar = find("ILSVRC2012_img_train.tar")
if train_tar:
    train.mkdir(exist_ok=True)
    done = skipped = 0
    with tarfile.open(train_tar, "r|") as outer:
        for m in outer:
            if not m.isfile() or not m.name.endswith(".tar"):
                continue
            wnid = Path(m.name).stem
            if (train / wnid).is_dir():
                skipped += 1
                continue
            part = train / f".{wnid}.partial"
            shutil.rmtree(part, ignore_errors=True)
            with tarfile.open(fileobj=outer.extractfile(m), mode="r|") as inner:
                extract_all(inner, part)
            part.rename(train / wnid)
            done += 1
    print(f"[imagenet] train: unpacked {done} class folders from {train_tar}"
          + (f" ({skipped} already there)" if skipped else ""))
bad = train / "n04266014" / CORRUPT
if bad.is_file():
    bad.unlink()
    print(f"[imagenet] deleted the known-corrupt {bad}")

# --- val --------------------------------------------------------------------------------------
val = dest / "val"
val_tar = find("ILSVRC2012_img_val.tar")
flat = sorted(p for p in val.glob("*.JPEG")) if val.is_dir() else []
if (val_tar or flat) and not val_truth:
    print("[imagenet] val: need the ground truth to sort the images: put "
          "ILSVRC2012_devkit_t12.tar.gz (or Kaggle's LOC_val_solution.csv) in "
          f"{dest}/ or pass it as an argument")
elif val_tar or flat:
    val.mkdir(exist_ok=True)
    moved = 0
    for p in flat:                                  # already unpacked, flat
        if p.name in val_truth:
            (val / val_truth[p.name]).mkdir(exist_ok=True)
            p.rename(val / val_truth[p.name] / p.name)
            moved += 1
    if val_tar:
        with tarfile.open(val_tar, "r|") as t:
            for m in t:
                name = Path(m.name).name
                if not m.isfile() or name not in val_truth:
                    continue
                out = val / val_truth[name] / name
                if out.is_file():
                    continue
                out.parent.mkdir(exist_ok=True)
                tmp = out.with_name("." + name + ".partial")
                with t.extractfile(m) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                tmp.rename(out)
                moved += 1
    print(f"[imagenet] val: sorted {moved} images into {val}/<wnid>/")

# --- report -----------------------------------------------------------------------------------
ok = True
for split, tarname in (("train", "ILSVRC2012_img_train.tar"), ("val", "ILSVRC2012_img_val.tar")):
    d = dest / split
    have = sorted(e.name for e in os.scandir(d) if e.is_dir() and not e.name.startswith(".")) \
        if d.is_dir() else []
    expected = wnids if wnids else None
    missing = sorted(set(expected) - set(have)) if expected else []
    if not have or missing:
        ok = False
        what = (f"{len(missing)} of {len(expected)} class folders missing (e.g. {missing[0]})"
                if have and missing else "missing")
        print(f"[imagenet] {split}: {what}; download {tarname} from "
              f"https://image-net.org/download-images and run: "
              f"bash download_imagenet.sh /path/to/{tarname}")
    else:
        print(f"[imagenet] {split}: {len(have)} class folders in {d}")
if not wnids:
    print(f"[imagenet] no class list: labels follow the sorted folders of each split; for the "
          f"standard 0-999 labels pass ILSVRC2012_devkit_t12.tar.gz or LOC_synset_mapping.txt")
sys.exit(0 if ok else 1)
PYEOF
