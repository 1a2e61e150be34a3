"""Features on disk that resume and verify: the file ``rdx features`` writes.

``FILE.npz`` (arrays ``features`` n×d float32, ``ids``, ``labels``, ``class_names`` and
``provenance``, a JSON text) or ``FILE.npy`` (the features alone), each with
``FILE.<ext>.json`` next to it (the provenance: model id, weights, layer, preprocessing,
images, versions, seed, device, timings, and the file's SHA-256 under ``content``).

Resumable: the images are done in chunks, each written atomically to ``FILE.<ext>.parts/``
as soon as it is finished; a killed run started again skips the finished chunks. A
finished output whose provenance matches the request is reused; the parts folder is
removed once the output is written.

Nothing stored is reused unverified (:mod:`rdx.io`, stored data): the parts folder's
manifest records each chunk's SHA-256 before the chunk is written, and a chunk whose bytes
differ (a flipped bit, zeros, permuted rows, another run's chunk) is named and computed
again, at the resume and again when the chunks are joined. The sidecar records the
output's SHA-256, so an output that was truncated or replaced is computed again rather
than reported up to date. Manifests and sidecars carry the digest of their own content
(``record_sha256``); those of earlier versions, which have none, are unverified: their
chunks and outputs are computed again.

This is the one format of "features on disk" a user hands to ``rdx explain``;
:mod:`rdx.models.extract` keeps a separate in-process cache of a study's features
(keyed by model, images and preprocessing), which users never name.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..progress import status

#: Images per chunk file of a resumable run (a few minutes of CPU work for small models).
DEFAULT_CHUNK = 512
PARTS_SUFFIX = ".parts"
MANIFEST = "manifest.json"
#: Versions of the parts layout and of the provenance record (2: content digests).
SCHEMA = 2


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + PARTS_SUFFIX)


def sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".json")


def _chunk_path(parts: Path, i: int) -> Path:
    return parts / f"chunk-{i:05d}.npy"


def prepare_parts(parts: Path, key: str, n: int, chunk: int
                  ) -> tuple[list[int], dict[str, str]]:
    """The finished chunks of an earlier run of this request and the manifest's record of
    every chunk's SHA-256.

    A manifest of another request (key, chunk size or image count), one that was altered
    or one of an earlier version (no digests) takes its parts with it; a chunk whose bytes
    do not match the digest recorded for it is named on stderr (also under ``--quiet``)
    and removed (it is computed again), as is a chunk of the wrong number of rows.
    """
    from ..io import read_record, stored_problem, write_record

    manifest = parts / MANIFEST
    old, problem = read_record(manifest, "features parts manifest")
    same = old is not None and old.get("schema") == SCHEMA and old.get("key") == key \
        and old.get("chunk_size") == chunk and old.get("n") == n
    if problem is not None and any(parts.glob("chunk-*.npy")):
        status(f"{problem}; its chunks are computed again")
    if parts.exists() and not same:
        remove_parts(parts)
    digests = dict(old.get("chunks") or {}) if same else {}
    done = []
    for i in range((n + chunk - 1) // chunk):
        p = _chunk_path(parts, i)
        if not p.is_file():
            digests.pop(p.name, None)
            continue
        bad = stored_problem(p, digests.get(p.name), "features chunk")
        if bad is None:
            try:
                rows = np.load(p, mmap_mode="r", allow_pickle=False).shape[0]
            except (OSError, ValueError, EOFError):
                rows = -1
            if rows == min(chunk, n - i * chunk):
                done.append(i)
                continue
            bad = f"features chunk {p} has {rows} rows, not {min(chunk, n - i * chunk)}"
        status(f"{bad}; computing it again")
        p.unlink(missing_ok=True)
        digests.pop(p.name, None)
    write_record(manifest, _manifest(key, n, chunk, digests))
    return done, digests


def _manifest(key: str, n: int, chunk: int, digests: dict[str, str]) -> dict[str, Any]:
    return {"schema": SCHEMA, "key": key, "chunk_size": chunk, "n": n,
            "chunks": dict(sorted(digests.items()))}


def write_chunk(parts: Path, i: int, features: np.ndarray, digests: dict[str, str],
                key: str, n: int, chunk: int) -> None:
    """Write chunk ``i``: its SHA-256 goes into the manifest first, then the chunk file.

    In this order a kill between the two writes leaves a digest without a chunk (the chunk
    is computed again), never a chunk without a digest.
    """
    import io as _io

    from ..io import atomic_write, bytes_sha256, write_record

    buf = _io.BytesIO()
    np.save(buf, features, allow_pickle=False)
    data = buf.getvalue()
    path = _chunk_path(parts, i)
    digests[path.name] = bytes_sha256(data)
    write_record(parts / MANIFEST, _manifest(key, n, chunk, digests))
    atomic_write(path, lambda fh: fh.write(data))


def join_chunks(parts: Path, n_chunks: int, digests: dict[str, str]
                ) -> tuple[np.ndarray | None, list[int]]:
    """The chunks' features, each read once and checked against its recorded SHA-256:
    (features, []) when every chunk matches, (None, the chunks that do not) otherwise (each
    named on stderr, also under --quiet, and removed)."""
    from ..io import StoredDataMismatch, load_npy_stored

    arrays, bad = [], []
    for i in range(n_chunks):
        p = _chunk_path(parts, i)
        try:
            arrays.append(load_npy_stored(p, digests.get(p.name), "features chunk"))
        except StoredDataMismatch as exc:
            status(f"{exc}; computing it again")
            p.unlink(missing_ok=True)
            bad.append(i)
        except (OSError, ValueError, EOFError) as exc:   # the digest matched: not ours
            status(f"features chunk {p} does not load ({exc}); computing it again")
            p.unlink(missing_ok=True)
            bad.append(i)
    return (None, bad) if bad else (np.concatenate(arrays), [])


def remove_parts(parts: Path) -> None:
    """Remove a parts folder (only what this command writes there)."""
    for p in list(parts.glob("chunk-*.npy")) + list(parts.glob(".chunk-*.tmp")) \
            + list(parts.glob(f"*{MANIFEST}*")):
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):   # files someone else put there stay
        parts.rmdir()


def read_provenance(out: Path) -> dict | None:
    """The provenance of an existing output (its sidecar), or None (no output, no
    sidecar, or an unreadable one)."""
    try:
        return json.loads(sidecar(out).read_text()) if out.is_file() else None
    except (OSError, ValueError):
        return None


def images_of_features(specs: list[str | None], folder: Path, n: int
                       ) -> tuple[dict | None, list[str] | None]:
    """Where the images of features written by ``rdx features`` are, for a comparison
    folder: ``images.json``'s ``source`` (a ``files`` record of their image folder, CSV list
    or dataset, relative to ``folder``; :func:`rdx.results.writer.files_source`) and their
    ids, from the provenance beside each features file of ``specs`` (``FILE.npz[:KEY]``).
    (None, None) when no file has one, or the files list other or differently many
    images."""
    from ..paths import split_array_key
    from ..results.writer import files_source

    found = []
    for spec in specs:
        prov = read_provenance(split_array_key(spec)[0]) if spec else None
        if not isinstance(prov, dict) or not isinstance(prov.get("ids"), list):
            continue
        data = prov.get("dataset") if isinstance(prov.get("dataset"), dict) else {}
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        # a folder or CSV by its resolved path (the command may have run elsewhere); a
        # built-in dataset by the name it was given
        where = info.get("source") if info.get("layout") else None
        text = where if where and Path(where).exists() else prov.get("source")
        if text:
            found.append((str(text), data.get("split"), [str(i) for i in prov["ids"]]))
    if not found or any(f[2] != found[0][2] for f in found) or len(found[0][2]) != n:
        return None, None
    text, split, ids = found[0]
    return files_source(folder, text, split=split), ids


def up_to_date(out: Path, key: str) -> tuple[dict | None, str | None]:
    """(provenance, None) when ``out`` is a verified result of the request ``key``: its
    sidecar is intact (``record_sha256``), of this request, and records the SHA-256 the
    output's bytes have. Else (None, why it is computed again) — None when there is no
    earlier output or it is of another request, which needs no explanation."""
    from ..io import read_record, stored_problem

    if not out.is_file() or not sidecar(out).is_file():
        return None, None
    record, problem = read_record(sidecar(out), "provenance record")
    if problem is not None:
        old = read_provenance(out)
        if isinstance(old, dict) and old.get("key") != key:
            return None, None   # another request's output, whatever its record
        return None, f"{problem}; the features are computed again"
    if record.get("key") != key:
        return None, None
    bad = stored_problem(out, (record.get("content") or {}).get("sha256"), "features file")
    if bad is not None:
        return None, f"{bad}; the features are computed again"
    return record, None


def write_output(out: Path, features: np.ndarray, ids: list[str], labels: np.ndarray,
                 class_names: list[str], provenance: dict) -> None:
    """The features file, then its sidecar (the sidecar marks the output complete, and
    records the file's SHA-256 and size under ``content``)."""
    from ..io import atomic_write, file_sha256, save_npz_atomic, write_record

    # the old sidecar goes first: killed between the two writes, a stale sidecar would
    # vouch for the new features as the old request's
    sidecar(out).unlink(missing_ok=True)
    text = json.dumps(provenance, sort_keys=True, default=str)
    if out.suffix == ".npz":
        save_npz_atomic(out, features=features, ids=np.array(ids, dtype=str),
                        labels=labels.astype(np.int64),
                        class_names=np.array(class_names, dtype=str),
                        provenance=np.array(text))
    else:
        atomic_write(out, lambda fh: np.save(fh, features, allow_pickle=False))
    # hashed from the file (the page cache holds it): the bytes a later reader will check
    content = {"sha256": file_sha256(out), "bytes": out.stat().st_size}
    write_record(sidecar(out), {**provenance, "content": content, "ids": ids,
                                "labels": labels.astype(int).tolist(),
                                "class_names": class_names})
