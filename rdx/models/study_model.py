"""The model of a layer-wise study: the embedded small ViT (trained from its recipe when its
checkpoint is missing) or any zoo model, with its cache identity, transform and forward."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import RDXInputError
from ..io import file_sha256


#: The model name of the embedded small ViT (:mod:`rdx.models.vit`).
EMBEDDED_VIT = "rdx_vit"


@dataclasses.dataclass
class StudyModel:
    """The model of a study: its LoadedModel (cache identity, transform) and forward."""

    loaded: Any
    run: Callable
    info: dict


def _train_embedded(t: Any, path: Path, *, device: str, progress: bool, say: Callable) -> None:
    """Train the embedded ViT from the recipe ``t`` (a study's ``train`` section)."""
    from ..data import get_dataset
    from ..data.sampling import select_per_class
    from .vit import train_vit

    ds = get_dataset(t.dataset, split=t.split, root=t.root, data_root=t.data_root)
    idx = select_per_class(ds.ids, ds.labels, None, t.per_class, seed=t.selection_seed)
    test = None if t.test_split is None else get_dataset(t.dataset, split=t.test_split,
                                                         root=t.root, data_root=t.data_root)
    say(f"training the embedded ViT on {len(idx)} {ds.name} images → {path}")
    arch = {"num_classes": len(ds.class_names), **t.arch}
    train_vit(ds.subset(idx), path, test_ds=test, arch=arch, epochs=t.epochs,
              batch_size=t.batch_size, lr=t.lr, weight_decay=t.weight_decay, seed=t.seed,
              device=device, progress=progress,
              data_info={"per_class": t.per_class, "selection_seed": t.selection_seed})


def load_study_model(m: Any, *, train: Any = None, device: str = "auto", progress: bool = True,
                     say: Callable = print) -> StudyModel:
    """Load (and for the embedded ViT, train if missing) the model of a study.

    Parameters
    ----------
    m : model section
        ``model`` (``rdx_vit`` or a zoo name), ``checkpoint``, and the zoo's spec keys
        (``pretrained``, ``model_kwargs``, ``seed``); a pydantic model (``model_dump``).
    train : train section, optional
        The embedded ViT's recipe (dataset, split, per_class, arch, epochs, ...), used when
        its checkpoint is missing.
    device : str
        Where the embedded ViT trains.
    """
    from .layers import forward_fn
    from .loaded_model import LoadedModel
    from .zoo import load_model

    if m.model == EMBEDDED_VIT:
        from .vit import load_vit, vit_transform

        path = Path(m.checkpoint)
        if not path.is_file():
            if train is None:
                raise RDXInputError(f"model.checkpoint {str(path)!r} does not exist; add a "
                                    "'train' section to train the embedded ViT.")
            _train_embedded(train, path, device=device, progress=progress, say=say)
        model, meta = load_vit(path)
        arch = meta["vit"]
        model_id = EMBEDDED_VIT + "(" + ",".join(f"{k}={arch[k]!r}" for k in sorted(arch)) + ")"
        loaded = LoadedModel(model, vit_transform(meta), model_id,
                             f"{path.resolve()}:sha256={file_sha256(path)}", "", model,
                             {"family": EMBEDDED_VIT, "checkpoint": str(path)})
        info = {"model": EMBEDDED_VIT, "model_id": model_id, "weights_id": loaded.weights_id,
                "checkpoint": str(path), "train_accuracy": meta.get("train_accuracy"),
                "test_accuracy": meta.get("test_accuracy"), "training": meta.get("training"),
                "arch": arch}
        return StudyModel(loaded, model, info)
    spec = m.model_dump()
    if spec["checkpoint"] is None:
        del spec["checkpoint"]
    loaded = load_model(spec)
    loaded.model.eval()
    return StudyModel(loaded, forward_fn(loaded.model),
                      {"model": m.model, "model_id": loaded.model_id,
                       "weights_id": loaded.weights_id, **loaded.info})
