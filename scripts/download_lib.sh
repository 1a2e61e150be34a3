# shellcheck shell=bash
# Helpers shared by the top-level download_*.sh scripts (sourced from the repository root).

PY="${RDX_PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3

fetch() {  # URL OUT: download, continuing a partial OUT
    if command -v curl >/dev/null 2>&1; then
        curl -fL --retry 3 -C - -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -c -O "$2" "$1"
    else
        echo "neither curl nor wget is installed" >&2; return 1
    fi
}

fetch_zip() {  # TAG URL ARCHIVE: make ARCHIVE a complete zip (resuming ARCHIVE.part)
    local tag="$1" url="$2" arc="$3"
    if [ -f "$arc" ] && "$PY" -m zipfile -t "$arc" >/dev/null 2>&1; then
        return 0
    fi
    echo "[$tag] fetching $url"
    fetch "$url" "$arc.part"
    if ! "$PY" -m zipfile -t "$arc.part" >/dev/null 2>&1; then
        echo "[$tag] $arc.part is not a complete zip (interrupted? run again to resume;" \
             "delete it if it keeps failing)" >&2
        return 1
    fi
    mv "$arc.part" "$arc"
}
