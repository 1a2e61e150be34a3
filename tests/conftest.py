"""Test configuration.

The tests run with the threading users get: rdx is imported first, as a user's script that
starts with ``import rdx`` (or the ``rdx`` command) does, and chooses the OpenMP wait policy
and the thread count itself (rdx/threads.py) before any test module loads torch.
"""
import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import rdx  # noqa: F401  (first: before torch or scikit-learn load an OpenMP runtime)

os.environ.setdefault("MPLBACKEND", "Agg")
# rdx's cache (the digits example's trained MLP) in a folder of this session, not the
# user's ~/.cache/rdx: every session trains it once, as a first run does
_CACHE = tempfile.mkdtemp(prefix="rdx-test-cache-")
os.environ["RDX_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def planted_pairs(n_per: int = 40, d: int = 16, seed: int = 0, spread: float = 12.0):
    """6 Gaussian clusters in A; in B clusters (0,1), (2,3), (4,5) coincide.

    Returns A, B, cluster id per image.
    """
    r = np.random.default_rng(seed)
    centers = r.standard_normal((6, d)) * spread
    lab = np.repeat(np.arange(6), n_per)
    A = centers[lab] + r.standard_normal((len(lab), d))
    cb = centers.copy()
    cb[1::2] = cb[0::2]
    B = cb[lab] + r.standard_normal((len(lab), d))
    return A.astype(np.float32), B.astype(np.float32), lab


def statistic_ranks(X):
    """Neighbour ranks computed independently: stable argsort of exact float64 distances."""
    D = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=2)
    order = np.argsort(D, axis=1, kind="stable")
    R = np.empty_like(order)
    np.put_along_axis(R, order, np.arange(len(X))[None, :], axis=1)
    return R.astype(np.float64)


def reference_statistic(X, Y, members, direction, gamma, beta):
    """The excess-affinity statistic of one group, pair by pair from independent ranks."""
    RX, RY = statistic_ranks(X.astype(np.float64)), statistic_ranks(Y.astype(np.float64))
    total = 0.0
    for i in members:
        for j in members:
            if i == j:
                continue
            far, tight = (RY[i, j], RX[i, j]) if direction == "a_over_b" else (RX[i, j], RY[i, j])
            total += np.exp(beta * np.tanh(gamma * (far - tight) / (min(RX[i, j], RY[i, j]) + 1))) - 1
    return total / len(members)


# ------------------------------------------------------------------ digit runs

#: The image selection of the digit runs made here: 40 images each of 3, 5 and 8.
SEL = {"dataset": "digits", "target_classes": [3, 5, 8], "num_images": 40, "seed": 0}


def digit_features(folder: Path, noise_seed: int = 0, b_name: str = "B.npy"):
    """Features of SEL's 120 digit images, saved as ``folder/A.npy`` and ``folder/<b_name>``.

    A = raw pixels; B = A with every 5 replaced by a 3 plus |noise|, so B merges 3 and 5 (the
    noise is non-negative so that NMF can run on B). Returns the selected indices, A and B.
    """
    from rdx.data import get_dataset, select_per_class

    ds = get_dataset("digits")
    idx = select_per_class(ds.ids, ds.labels, SEL["target_classes"], SEL["num_images"],
                           seed=SEL["seed"])
    lab = ds.labels[idx]
    A = ds.images[idx].reshape(len(idx), -1).astype(np.float32)
    B = A.copy()
    fives = lab == 5
    B[fives] = A[lab == 3][: fives.sum()] + np.abs(
        np.random.default_rng(noise_seed).normal(0, 1, (fives.sum(), A.shape[1])))
    np.save(folder / "A.npy", A)
    np.save(folder / b_name, B)
    return idx, A, B


def toy_config(folder: Path, **over) -> Path:
    """``folder/toy.yaml``: experiment "toy" on digit_features' files with two RDX variants,
    one comparison; ``over`` is deep-merged into it (lists replace lists)."""
    import yaml

    from rdx.experiments.config import deep_merge

    doc = {"experiment": "toy", "seed": 3,
           "base": {"image_selection": dict(SEL),
                    "representations": {"a": {"features": str(folder / "A.npy")},
                                        "b": {"features": str(folder / "B.npy")}},
                    "methods": [{"method": "rdx", "name": "rdx_nb_lb_spectral",
                                 "n_explanations": 3, "gamma": 0.1},
                                {"method": "rdx", "name": "rdx_nb_lb_pagerank",
                                 "clustering": "pagerank", "n_explanations": 2}]},
           "comparisons": [{"name": "pixels_vs_merged"}]}
    path = folder / "toy.yaml"
    path.write_text(yaml.safe_dump(deep_merge(doc, over)))
    return path


# The shared run (toy_run). Its first comparison has RDX (saving its graphs), each kind of
# baseline that the reports and figures treat differently (per-model clustering,
# factorization with a dictionary, an aligned variant under its own name) and both
# similarity methods, in an order that is not the figures' canonical one. The second has
# another noise draw for B and k-means only, so that tables show a method missing from a
# comparison; its name needs URL quoting and the first's description HTML escaping.
MERGED, ODD_NAME = "merged", "b&w #2"
DESCRIPTION = "B merges 3 & 5 <script>alert('x')</script>"
TOY_METHODS = {
    MERGED: [{"method": "kmeans", "n_explanations": 3},
             {"method": "rdx", "n_explanations": 3, "gamma": 0.1, "save_graphs": True},
             {"method": "nmf", "n_explanations": 3},
             {"method": "pca", "name": "pca_ar0to1", "n_explanations": 2,
              "align_representations": "0to1", "align_params": {"num_steps": 5}},
             {"method": "cka"},
             {"method": "classification", "folds": 3}],
    ODD_NAME: [{"method": "kmeans", "n_explanations": 2}],
}
NO_GRIDS = ("cka", "classification")      # similarity methods: scores, no explanations


@dataclass(frozen=True)
class ToyRun:
    """A finished run of experiment "toy" (see TOY_METHODS)."""
    folder: Path          # the features (A.npy, B.npy, B2.npy) and the config
    config: Path
    root: Path            # the output root: the run is root/toy/<comparison>
    idx: np.ndarray       # the selected digits' dataset indices

    @property
    def exp(self) -> Path:
        return self.root / "toy"

    def comp(self, name: str = MERGED) -> Path:
        return self.exp / name

    @staticmethod
    def methods(comparison: str = MERGED) -> list[str]:
        """Method names of a comparison, in config order."""
        return [m.get("name", m["method"]) for m in TOY_METHODS[comparison]]

    @staticmethod
    def name_of(method: str, comparison: str = MERGED) -> str:
        """The name of the comparison's one entry of ``method`` (e.g. "rdx", "pca")."""
        (name,) = [m.get("name", m["method"]) for m in TOY_METHODS[comparison]
                   if m["method"] == method]
        return name

    @staticmethod
    def grid_methods(comparison: str = MERGED) -> list[str]:
        """The methods with explanations (grids), in config order."""
        return [m.get("name", m["method"]) for m in TOY_METHODS[comparison]
                if m["method"] not in NO_GRIDS]


def copy_toy_run(run: ToyRun, dest: Path) -> ToyRun:
    """A copy of ``run``'s outputs under ``dest/out`` (features and config are shared)."""
    shutil.copytree(run.exp, dest / "out" / run.exp.name)
    return replace(run, root=dest / "out")


def _snapshot(folder: Path) -> dict[str, tuple[int, int] | None]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            if p.is_file() else None for p in folder.rglob("*")}


@pytest.fixture(scope="session")
def toy_run(tmp_path_factory):
    """The finished run of TOY_METHODS, made once per session and shared: read it only.

    Tests that write into a run (reports, summaries, damaged files, resuming) take
    toy_run_copy or toy_run_module_copy. Any change to this one fails the session, since
    later tests would see it."""
    from rdx.experiments import run_experiment

    folder = tmp_path_factory.mktemp("toy_run")
    idx, _, _ = digit_features(folder)
    digit_features(folder, noise_seed=1, b_name="B2.npy")
    config = toy_config(
        folder,
        base={"methods": TOY_METHODS[MERGED],
              "known_difference": {"type": "merged_classes", "classes": [3, 5],
                                   "model": "b"}},
        comparisons=[{"name": MERGED, "description": DESCRIPTION},
                     {"name": ODD_NAME, "methods": TOY_METHODS[ODD_NAME],
                      "representations": {"b": {"features": str(folder / "B2.npy")}}}])
    run_experiment(config, output_root=folder / "out", device="cpu", progress=False)
    run = ToyRun(folder=folder, config=config, root=folder / "out", idx=idx)
    before = _snapshot(run.exp)
    yield run
    after = _snapshot(run.exp)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a test wrote into the shared toy_run (use a copy): {changed}"


@pytest.fixture
def toy_run_copy(toy_run, tmp_path) -> ToyRun:
    """A private copy of toy_run for one test, which may change it freely."""
    return copy_toy_run(toy_run, tmp_path)


@pytest.fixture(scope="module")
def toy_run_module_copy(toy_run, tmp_path_factory) -> ToyRun:
    """One copy of toy_run per test module, for modules that write reports or summaries
    into the run."""
    return copy_toy_run(toy_run, tmp_path_factory.mktemp("toy_run_copy"))


def dense_graph(A, B, gamma, direction, beta=5.0):
    """The exact method's matrices as references for the large-n tests: both models' dense
    neighbour ranks and the direction's symmetrised affinity (float64), as numpy arrays."""
    import torch

    from rdx.method.geometry import to_device_centered
    from rdx.method.ranks import rank_matrix
    from rdx.method.graphs import difference_matrix_, symmetrized_affinity

    cpu = torch.device("cpu")
    RA = rank_matrix(to_device_centered(A, cpu))
    RB = rank_matrix(to_device_centered(B, cpu))
    diff = difference_matrix_(RA.clone(), RB, "locally_biased", gamma=gamma)
    return RA.numpy(), RB.numpy(), symmetrized_affinity(diff, beta, direction).double().numpy()


def rdx_in_process(argv) -> tuple[int, str, str]:
    """``rdx ARGV`` in this process: exit status, stdout and stderr."""
    import contextlib
    import io

    from rdx.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()
