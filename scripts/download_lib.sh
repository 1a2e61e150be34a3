# shellcheck shell=bash
# Helpers shared by the top-level download_*.sh scripts (sourced from the repository root,
# after the script has changed into it).
#
#   SCRIPT                 the sourcing script's file name (for messages and --help)
#   RERUN                  the command that ran it (for "run ... again")
#   usage                  print the script's header comment (its documentation)
#   no_arguments ARGS...   for scripts without arguments: --help/-h, or exit 2
#   bad_usage MESSAGE      exit 2 with MESSAGE and a pointer to --help
#   fetch TAG URL OUT VAR  download (resuming OUT); on failure one paragraph saying why; on
#                          SIGINT/SIGTERM/SIGHUP one saying what is kept (exit 130/143/129)
#   fetch_zip TAG URL ARCHIVE VAR   make ARCHIVE a complete zip
#   tgz_holds ARCHIVE MEMBER        0 complete .tgz listing MEMBER, 1 not complete, 2 no MEMBER

PY="${RDX_PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
SCRIPT="$(basename "${BASH_SOURCE[1]}")"
RERUN="bash $SCRIPT${*:+ $*}"   # sourced without arguments: $* are the script's own

usage() {  # the header comment of the script, without the shebang and the '# ' prefixes
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$SCRIPT"
}

bad_usage() {  # MESSAGE
    echo "$SCRIPT: $1 (see: bash $SCRIPT --help)" >&2
    exit 2
}

no_arguments() {  # ARGS...: --help/-h prints the usage and exits 0; anything else exits 2
    local a
    for a in "$@"; do
        case "$a" in -h|--help) usage; exit 0 ;; esac
    done
    [ $# -eq 0 ] || bad_usage "unknown argument '$1'; this script takes no arguments"
}

say() {  # one paragraph on stderr (one line: the terminal wraps it, URLs stay whole)
    printf '%s\n' "$*" >&2
}

size_of() {  # FILE: its size, human readable
    local bytes
    bytes="$(wc -c <"$1" | tr -d ' ')"
    awk -v b="$bytes" 'BEGIN { if (b >= 1048576) printf "%.1f MB", b / 1048576;
                               else printf "%d bytes", b }'
}

interrupted() {  # TAG URL OUT SIGNAL STATUS: a download stopped by Ctrl-C, kill or hang-up
    # The partial file is kept on purpose: every fetch continues it (curl -C -, wget -c),
    # so an interrupted multi-gigabyte download is not started over. Said so, in one
    # paragraph; an empty file is no partial download and is removed.
    trap - INT TERM HUP
    if [ -s "$3" ]; then
        say "[$1] interrupted ($4): $(size_of "$3") of $2 are kept in $3; \`$RERUN\`" \
            "continues the download from there (delete $3 to start over)."
    else
        rm -f "$3"
        say "[$1] interrupted ($4): nothing of $2 was downloaded; run \`$RERUN\` again."
    fi
    exit "$5"
}

fetch() {  # TAG URL OUT VAR: download URL to OUT, continuing a partial OUT (VAR names the URL)
    local tag="$1" url="$2" out="$3" rc=0
    # an interrupt while the transfer runs: one paragraph on what is kept, status 128 + signal
    trap 'interrupted "$tag" "$url" "$out" SIGINT 130' INT
    trap 'interrupted "$tag" "$url" "$out" SIGTERM 143' TERM
    trap 'interrupted "$tag" "$url" "$out" SIGHUP 129' HUP
    _fetch "$@" || rc=$?
    trap - INT TERM HUP
    return "$rc"
}

_fetch() {  # the transfer and its failure message (see fetch)
    local tag="$1" url="$2" out="$3" var="$4" rc=0 code="" why resumable=1
    local host="${url#*://}"
    host="${host%%/*}"
    if command -v curl >/dev/null 2>&1; then
        # progress bar on a terminal; otherwise silent (the failure is explained below)
        local quiet=(-s)
        [ -t 2 ] && quiet=(--progress-bar)
        code="$(curl -fL "${quiet[@]}" --retry 3 --connect-timeout 30 -C - -w '%{http_code}' \
                     -o "$out" "$url")" || rc=$?
        case "$rc" in
            0) return 0 ;;
            5) why="could not resolve the proxy host (check http_proxy/https_proxy)" ;;
            6) why="could not resolve the host name $host: no internet connection, or DNS is"
               why="$why failing" ;;
            7) why="could not connect to $host: no internet connection, a firewall, or the"
               why="$why server is down" ;;
            28) why="the connection to $host timed out" ;;
            35|51|53|54|58|59|60|77|80|83|90|91)
                why="the secure (TLS) connection to $host failed: certificates, or a proxy"
                why="$why intercepting HTTPS" ;;
            22) why="the server answered HTTP $code"
                case "$code" in
                    404|410) why="$why (the file is not at this address)" ;;
                    401|403) why="$why (access refused)" ;;
                esac ;;
            16|18|52|55|56|92) why="the connection broke during the transfer" ;;
            23) why="could not write $out (disk full, or the folder is not writable)" ;;
            33|36) why="the server cannot continue a partial download"; resumable=0 ;;
            37) why="could not read the local file (is the file:// path right?)" ;;
            *) why="curl failed with exit status $rc" ;;
        esac
    elif command -v wget >/dev/null 2>&1; then
        local quiet=(-q)
        [ -t 2 ] && quiet=()
        wget "${quiet[@]}" -c -O "$out" "$url" || rc=$?
        case "$rc" in
            0) return 0 ;;
            3) why="could not write $out (disk full, or the folder is not writable)" ;;
            4) why="network failure reaching $host (no internet connection, or DNS is failing)" ;;
            5) why="the secure (TLS) connection to $host failed" ;;
            8) why="the server answered with an error (is the address right?)" ;;
            *) why="wget failed with exit status $rc" ;;
        esac
    else
        say "[$tag] neither curl nor wget is installed; install one (e.g. apt-get install curl)" \
            "and run \`$RERUN\` again."
        return 1
    fi
    if [ -s "$out" ] && [ "$resumable" = 0 ]; then
        say "[$tag] could not download $url: $why. Delete $out ($(size_of "$out")) and run" \
            "\`$RERUN\` again to download it from the start."
    elif [ -s "$out" ]; then
        say "[$tag] could not download $url: $why. $(size_of "$out") of it are kept in $out;" \
            "\`$RERUN\` continues from there once the connection works (or set $var to a" \
            "mirror, or to file:///path/to/a/copy)."
    else
        rm -f "$out"   # an empty file left by the attempt is no partial download
        say "[$tag] could not download $url: $why. Nothing was downloaded. Check the connection" \
            "(or set $var to a mirror, or to file:///path/to/a/copy) and run \`$RERUN\` again."
    fi
    return 1
}

fetch_zip() {  # TAG URL ARCHIVE VAR: make ARCHIVE a complete zip (resuming ARCHIVE.part)
    local tag="$1" url="$2" arc="$3" var="$4"
    if [ -f "$arc" ] && "$PY" -m zipfile -t "$arc" >/dev/null 2>&1; then
        return 0
    fi
    echo "[$tag] fetching $url"
    fetch "$tag" "$url" "$arc.part" "$var" || return 1
    if ! "$PY" -m zipfile -t "$arc.part" >/dev/null 2>&1; then
        # the transfer itself completed, so resuming cannot repair it
        say "[$tag] the download finished, but it is not a valid zip archive" \
            "($(size_of "$arc.part"); the server may have sent an error page instead of the" \
            "file); removed it. Check $var ($url) and run \`$RERUN\` again."
        rm -f "$arc.part"
        return 1
    fi
    mv "$arc.part" "$arc"
}

tgz_holds() {  # ARCHIVE MEMBER: 0 complete .tgz listing MEMBER, 1 not a complete .tgz, 2 no MEMBER
    local listing
    # The whole listing first, then the search: piping `tar -t` into a reader that stops at
    # the first match (grep -q) kills tar with SIGPIPE, which pipefail reports as a broken
    # archive — and a correct archive would be deleted.
    listing="$(tar -tzf "$1" 2>/dev/null)" || return 1
    grep -qxF -- "$2" <<<"$listing" || return 2
}
