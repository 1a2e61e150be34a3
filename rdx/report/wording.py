"""The words of a comparison's report: what each representation and the images are, the
overall similarity scores, config values, and the class make-up of a set of images."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..paths import shown_path, without_machine_paths
from ..results.types import MethodResult
from .html import esc, fmt

SIMILARITY_LABEL = {"cka_debiased": "CKA (linear, debiased)", "cka_biased": "CKA (linear, biased)"}


def _shown(path: Any, base: str | Path | None) -> str:
    return str(path) if base is None else shown_path(str(path), base)


def describe_representation(spec: dict | None, base: str | Path | None = None) -> str:
    """One line saying what a representation is (model, checkpoint, layer, or features file).

    ``base``: the folder of the page; an absolute path (features, checkpoint) is shown
    relative to it, so that the page names no folder of the machine that wrote it."""
    if not spec:
        return "unknown representation"
    if "distances" in spec:
        return f"precomputed distance matrix {_shown(spec['distances'], base)}"
    if "features" in spec:
        text = f"precomputed features {_shown(spec['features'], base)}"
        if spec.get("exclude_dims"):
            text += f" without dimensions {list(spec['exclude_dims'])}"
        return text
    parts = [str(spec.get("model", "model"))]
    if spec.get("checkpoint"):
        parts.append(f"checkpoint {_shown(spec['checkpoint'], base)}")
    elif spec.get("pretrained") not in (None, False):
        parts.append(f"pretrained {spec['pretrained']}")
    if spec.get("layer"):
        parts.append(f"layer {spec['layer']}")
    return ", ".join(parts)


def short_representation(spec: dict | None) -> str:
    """A few words for the index table (model name + checkpoint file, or features file)."""
    if not spec:
        return "?"
    if "features" in spec or "distances" in spec:
        return Path(str(spec.get("features") or spec["distances"])).name
    bits = [str(spec.get("model", "model"))]
    if spec.get("checkpoint"):
        bits.append(Path(str(spec["checkpoint"])).name)
    if spec.get("layer"):
        bits.append(str(spec["layer"]))
    return " · ".join(bits)


def _class_name(label: int, names: list) -> str:
    # flip-pair experiments label flipped copies c + n_classes, beyond the dataset's names
    return str(names[label]) if 0 <= label < len(names) else str(label)


def describe_images(run: dict, images: dict) -> str:
    """One line saying which images were compared (how many, dataset, split, classes)."""
    sel = run.get("config", {}).get("image_selection", {})
    dataset = images.get("dataset", sel.get("dataset", "?"))
    n = images.get("n_images", "?")
    split = images.get("split", sel.get("split", "train"))
    bits = [f"{split} split"] if split else []
    classes = sel.get("target_classes")
    if classes:
        names = images.get("class_names") or []
        shown = [_class_name(int(c), names) if isinstance(c, int) else str(c) for c in classes]
        bits.append("classes " + ", ".join(shown))
    return f"{n} images of {dataset}" + (f" ({', '.join(bits)})" if bits else "")


def shown_selection(selection: Any, base: str | Path) -> Any:
    """An ``image_selection`` block as a page in ``base`` shows it: its folders (``root``,
    ``data_root``) relative to the page when they are absolute, and no folder of the machine
    in its text (a dataset described by where it came from)."""
    if not isinstance(selection, dict):
        return selection
    return {k: shown_path(str(v), base) if k in ("root", "data_root") and v
            else without_machine_paths(v, base) if isinstance(v, str) else v
            for k, v in selection.items()}


def value_html(v: Any) -> str:
    """A config/parameter value as HTML (structures as compact JSON)."""
    if isinstance(v, (dict, list, tuple)):
        return f"<code>{esc(json.dumps(v, sort_keys=True, default=str))}</code>"
    if isinstance(v, float):
        return esc(fmt(v, 4))
    return esc(v)


def similarity_items(results: dict[str, MethodResult]) -> list[tuple[str, str]]:
    """(label, value) for every overall similarity score present (CKA, linear probes)."""
    items: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    for res in results.values():
        counts[res.method] = counts.get(res.method, 0) + 1
    for name, res in results.items():
        info = res.info
        # several runs of the same kind (e.g. two CKA settings) are told apart by name
        suffix = f" [{name}]" if counts.get(res.method, 0) > 1 else ""
        cal = info.get("calibration") or {}
        for key, val in (info.get("similarity") or {}).items():
            text = fmt(val)
            c = cal.get(key) or {}
            if c.get("ci95"):
                text += f" [{fmt(c['ci95'][0])}, {fmt(c['ci95'][1])}]"
            if c.get("p_value") is not None:
                text += f", p = {fmt(c['p_value'])}"
            items.append((SIMILARITY_LABEL.get(key, key) + suffix, text))
        probe = info.get("probe") or {}
        for side in ("a", "b"):
            if isinstance(probe.get(side), dict):
                folds = probe[side].get("fold_accuracies") or []
                extra = f" ({len(folds)}-fold CV)" if folds else ""
                items.append((f"Linear probe accuracy, model {side.upper()}{extra}{suffix}",
                              fmt(probe[side].get("accuracy"))))
        for key, val in (info.get("agreement") or {}).items():
            label = ("Probe prediction agreement A–B" if key == "a_b"
                     else f"Probe prediction agreement {key}")
            items.append((label + suffix, fmt(val)))
    return items


def _class_counts(indices: Iterable[int], images: dict) -> list[tuple[str, int]]:
    """(class name, count) of a set of images, most frequent first ([] without labels)."""
    labels = images.get("labels")
    if not labels:
        return []
    names = images.get("class_names") or []
    counts: dict[str, int] = {}
    for i in indices:
        if 0 <= int(i) < len(labels):
            key = _class_name(int(labels[int(i)]), names)
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def composition(indices: Iterable[int], images: dict) -> str:
    """Class make-up of a set of images, e.g. '3 ×5, 5 ×4' (most frequent first)."""
    return ", ".join(f"{k} ×{v}" for k, v in _class_counts(indices, images))


def shares(indices: Iterable[int], images: dict, *, top: int = 4) -> str:
    """Class make-up of a set of images in shares, e.g. '48 % Trouser, 30 % Dress, …'
    (the ``top`` most frequent, then how many classes are left out)."""
    counts = _class_counts(indices, images)
    total = sum(c for _, c in counts)
    if not total:
        return ""
    text = ", ".join(f"{100 * c / total:.0f} % {k}" for k, c in counts[:top])
    return text + (f", … {len(counts) - top} more" if len(counts) > top else "")


#: A cluster has a leading class when it holds at least this share of it; a grid that
#: holds less than half that share of it does not represent the cluster.
LEADING_SHARE = 0.25


def grid_represents_cluster(exp: dict, images: dict) -> bool | None:
    """Whether a grid shows its cluster's classes: False when the cluster has a leading
    class (at least :data:`LEADING_SHARE` of its members) that the grid holds at less than
    half its share in the cluster and the grid's own most frequent class is another one
    (e.g. a grid of Coat ×6, Shirt ×2, Pullover ×1 from a cluster of 48 % Trouser); None
    without labels or members. A grid of 9 images from a cluster of mixed classes differs
    from it by chance alone, hence only a leading class counts."""
    members, shown = exp.get("members"), exp.get("images") or []
    if members is None or not shown:
        return None
    whole, grid = _class_counts(members, images), dict(_class_counts(shown, images))
    if not whole or not grid:
        return None
    lead, n_lead = whole[0]
    share = n_lead / sum(c for _, c in whole)
    in_grid = grid.get(lead, 0) / sum(grid.values())
    grid_top = max(grid.items(), key=lambda kv: kv[1])[0]
    return not (share >= LEADING_SHARE and in_grid < share / 2 and grid_top != lead)


def grid_caption_lines(exp: dict, images: dict) -> list[str]:
    """The class make-up lines under a grid, each saying what it counts: the images shown
    in the grid (counts) and, for methods with members (RDX, k-means, ...), the whole
    cluster (shares), so that a grid unlike its cluster shows it."""
    lines = []
    shown = exp.get("images") or []
    comp = composition(shown, images)
    if comp:
        lines.append(f"grid ({len(shown)} images): {comp}")
    members = exp.get("members")
    if members is not None:
        whole = shares(members, images)
        if whole:
            lines.append(f"whole cluster ({len(members)} images): {whole}")
    return lines


__all__ = ["LEADING_SHARE", "SIMILARITY_LABEL", "composition", "describe_images",
           "describe_representation", "grid_caption_lines", "grid_represents_cluster",
           "shares", "short_representation", "shown_selection", "similarity_items",
           "value_html"]
