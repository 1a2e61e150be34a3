"""mkdocs hook: the site works from disk with nothing fetched, search included.

Material's ``offline`` plugin makes search work from ``file://`` (it inlines the search
index into a script) but needs the ``iframe-worker`` shim, because a browser starts no Web
Worker from a ``file://`` page: the shim runs the search worker in a hidden iframe instead.
The plugin adds the shim as a script from a CDN unless ``extra.polyfills`` already names
one, so every page would request it (and log a console error offline). This hook names a
local copy instead and installs it when the site builds: ``npm pack iframe-worker@VERSION``
(the package from the npm registry, checked against the integrity pinned below), cached
in ``outputs/cache/docs_npm/``. The shim and the package's licence are written into the
site as ``assets/javascripts/iframe-worker-shim.js`` and ``iframe-worker-LICENSE.txt``.

Without npm (or with no way to reach its registry and nothing cached) the build stops
with a message saying so, rather than write a site whose search does not work.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "outputs" / "cache" / "docs_npm"

PACKAGE = "iframe-worker"
VERSION = "1.0.4"
#: ``npm view iframe-worker@1.0.4 dist.integrity``: a tarball that differs is refused
INTEGRITY = ("sha512-roeaaI+Lg1LJNfgpCjoRe/+WzEjy9+Z08LoEvu85MCPbBjwm+qXz8Ag5U05lHa6V1Cys"
             "ZyGzE0SOkAtSUA5q7Q==")
#: where the pages load the shim from (relative to the site's root)
SHIM = "assets/javascripts/iframe-worker-shim.js"
LICENSE = "assets/javascripts/iframe-worker-LICENSE.txt"


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _npm_pack(dest: Path) -> bytes:
    """The package's tarball, by ``npm pack`` (npm's own registry settings apply)."""
    npm = shutil.which("npm")
    if npm is None:
        raise PluginError(
            f"the docs' offline search needs the npm package {PACKAGE} {VERSION}, which the "
            "build installs with npm, and npm is not installed: install Node.js with npm "
            "(Debian: apt-get install -y npm), or build without offline search by "
            "removing 'offline' from the plugins of mkdocs.yml")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        proc = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--json", "--silent",
                               "--pack-destination", tmp],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise PluginError(
                f"'npm pack {PACKAGE}@{VERSION}' failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}\nThe docs' offline search "
                "needs this package; build once where npm reaches its registry (the result "
                f"is cached in {CACHE.relative_to(ROOT)}/).")
        name = json.loads(proc.stdout)[0]["filename"]
        return (Path(tmp) / name).read_bytes()


def install_shim() -> Path:
    """The folder holding ``shim.js`` and ``LICENSE`` of the pinned package (from the cache,
    or installed now)."""
    done = CACHE / f"{PACKAGE}-{VERSION}"
    if (done / "shim.js").is_file() and (done / "LICENSE").is_file():
        return done
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = _npm_pack(done)
    got = _integrity(tarball)
    if got != INTEGRITY:
        raise PluginError(f"npm gave a {PACKAGE} {VERSION} tarball of integrity {got}, "
                          f"not the pinned {INTEGRITY} (docs/hooks/offline.py); refusing it")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        shim = tar.extractfile("package/shim/index.js").read()
        licence = tar.extractfile("package/LICENSE").read()
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=CACHE))
    (tmp / "shim.js").write_bytes(shim)
    (tmp / "LICENSE").write_bytes(licence)
    shutil.rmtree(done, ignore_errors=True)
    tmp.rename(done)
    return done


def on_config(config, **kwargs):
    """Name the local shim among the polyfills (before the offline plugin looks, or in
    place of the CDN address it added: hooks may run after plugins)."""
    polyfills = [p for p in config.extra.get("polyfills", []) if "iframe-worker" not in str(p)]
    config.extra["polyfills"] = [*polyfills, SHIM]
    return config


def on_files(files, config, **kwargs):
    """Add the shim and its licence to the site."""
    folder = install_shim()
    header = (f"/* {PACKAGE} {VERSION} (npm), MIT licence: see iframe-worker-LICENSE.txt. "
              "Installed by docs/hooks/offline.py when the docs build. */\n")
    files.append(File.generated(config, SHIM,
                                content=header + (folder / "shim.js").read_text("utf-8")))
    files.append(File.generated(config, LICENSE,
                                content=(folder / "LICENSE").read_text("utf-8")))
    return files
