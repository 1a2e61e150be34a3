"""Weights of zoo models: identifiers for feature caches, checkpoint files, seeded random
initialisation, and the errors that say where weights belong when they cannot be fetched.

Offline use
-----------
Weights are downloaded by timm / OpenCLIP (Hugging Face hub cache, ``HF_HOME`` /
``HF_HUB_CACHE``) or torchvision (``$TORCH_HOME/hub/checkpoints``). When they are neither
cached nor downloadable, :func:`rdx.models.zoo.load_model` raises
:class:`~rdx.errors.RDXInputError` naming the weights and the folder they are expected in
(:func:`offline_error`). ``HF_HUB_OFFLINE=1`` makes the hub fail at once instead of retrying
for about a minute.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from torch import nn

from ..errors import RDXInputError
from ..io import file_sha256
from ..input_files import check_input_file

#: ``weights_id`` prefix of randomly initialised models.
RANDOM_INIT = "random-init"


def random_weights_id(model: nn.Module, seed: int) -> str:
    """``weights_id`` of a random initialisation: the seed and a hash of the parameters."""
    from .checkpoint import state_dict_sha256

    # the hash, not just the seed: initialisation schemes change between library versions,
    # and a cache must never hand out features of a different random network
    return f"{RANDOM_INIT}(seed={seed},sha256={state_dict_sha256(model)[:16]})"


def checkpoint_id(path: Path) -> str:
    """``weights_id`` of a weights file: its resolved path and content hash."""
    return f"{path.resolve()}:sha256={file_sha256(path)}"


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch for a random initialisation without touching the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def kwargs_suffix(kwargs: Mapping) -> str:
    """``"(k=v,...)"`` of constructor overrides (sorted), appended to a ``model_id``."""
    return "" if not kwargs else "(" + ",".join(f"{k}={kwargs[k]!r}" for k in sorted(kwargs)) + ")"


# --------------------------------------------------------------------------- offline errors

def network_cause(exc: BaseException) -> BaseException | None:
    """The OSError (HTTP, connection, missing cache entry) in an exception chain, if any.

    timm and torchvision let it through; OpenCLIP wraps it in a RuntimeError.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _hf_cache_dir() -> str:
    try:
        from huggingface_hub import constants
        return str(constants.HF_HUB_CACHE)
    except ImportError:  # pragma: no cover - timm/open_clip depend on huggingface_hub
        return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def torch_cache_dir() -> str:
    """Where torchvision keeps downloaded weights."""
    return os.path.join(torch.hub.get_dir(), "checkpoints")


def offline_error(what: str, requested: str, cause: BaseException, where: str
                  ) -> RDXInputError:
    """The error for weights neither cached nor downloadable: what was requested, why the
    download failed and ``where`` the files are expected."""
    text = str(cause).strip()
    reason = type(cause).__name__ + (": " + text.splitlines()[0][:300] if text else "")
    return RDXInputError(
        f"could not load {what} {requested!r}: not in the local cache, and the download "
        f"failed ({reason}). Put the files where they are expected: {where}; or pass "
        "checkpoint=<path to a weights file>. For tests, pretrained=False builds a randomly "
        "initialised model.")


def hf_where(repo: str | None) -> str:
    """Where the Hugging Face hub keeps ``repo`` (for :func:`offline_error`)."""
    folder = f" (folder models--{repo.replace('/', '--')})" if repo else ""
    fetch = (f"; e.g. run `hf download {repo}` on a machine with internet and copy the cache "
             "folder here") if repo else ""
    return (f"the Hugging Face hub cache {_hf_cache_dir()}{folder} (set HF_HOME or "
            f"HF_HUB_CACHE for another location; HF_HUB_OFFLINE=1 fails fast){fetch}")


# --------------------------------------------------------------------------- checkpoint files

def check_checkpoint(checkpoint: str | os.PathLike | None) -> Path | None:
    """A checkpoint file checked as an input file (None: no checkpoint given)."""
    if checkpoint is None:
        return None
    return check_input_file(checkpoint, "checkpoint file", expect="a weights file",
                            register=False)


def load_state_dict_file(model: nn.Module, path: Path) -> None:
    """Load a plain (or ``{"state_dict"|"model": ...}``-wrapped) state dict file."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict):
            for key in ("state_dict", "model"):
                if isinstance(state.get(key), dict):
                    state = state[key]
                    break
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - torch.load/load_state_dict raise many types
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise RDXInputError(f"checkpoint {str(path)!r} does not hold weights for this model: "
                            f"{first}") from None
