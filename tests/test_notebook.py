"""Results shown in Jupyter (``_repr_html_``): a fitted RDX, a MethodResult, a comparison."""
from __future__ import annotations

import base64
from html.parser import HTMLParser

import numpy as np

from rdx import RDX
from rdx.results.notebook import makeup_text, method_result_html
from rdx.results.store import ComparisonRun

VOID = {"img", "br", "hr", "meta", "input", "link"}


class _Tags(HTMLParser):
    """Collects the tags, checking that every element is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.imgs: list[dict] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.imgs.append(dict(attrs))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def parsed(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    return p


def planted():
    rng = np.random.default_rng(0)
    B = np.repeat(np.eye(3) * 8, 20, axis=0) + 0.3 * rng.normal(size=(60, 3))
    A = B.copy()
    A[40:] = B[40:].mean(axis=0) + 4 * rng.normal(size=(20, 3))
    return A, B


def test_an_unfitted_rdx_shows_the_parameters_it_was_given():
    page = RDX(n_explanations=2, beta=4.0)._repr_html_()
    parsed(page)
    assert "beta=4.0" in page and "n_explanations=2" in page and "not fitted" in page
    assert "gamma_scale" not in page          # defaults are not listed


def test_a_fitted_rdx_shows_each_explanation():
    A, B = planted()
    fitted = RDX(n_explanations=2, grid_size=4).fit(A, B)
    page = fitted._repr_html_()
    assert parsed(page).imgs == []           # no images at hand: no grid column
    for d, r in fitted.directions_.items():
        assert d in page
        for e in r.explanations:
            assert f"<td style='padding:3px 8px;border-bottom:1px solid #8884;text-align:left;" \
                   f"vertical-align:top'>{len(e.members)}</td>" in page
            assert f"{e.mean_affinity:.2f}" in page
    assert fitted.result()._repr_html_() == page


def test_text_from_the_result_is_escaped():
    A, B = planted()
    result = RDX(n_explanations=2, grid_size=4).fit(A, B).result()
    result.directions["a_over_b"].explanations[0].extra["description"] = "<script>x</script>"
    page = method_result_html(result)
    assert "<script>" not in page and "&lt;script&gt;" in page
    parsed(page)


def test_makeup_names_classes_most_frequent_first():
    labels = np.array([3, 3, 5, 3, 5, 8])
    assert makeup_text(labels, [0, 1, 2, 3, 4, 5]) == "class 3×3, class 5×2, class 8×1"
    assert makeup_text(np.array(["Coat", "Shirt", "Coat"]), [0, 1, 2]) == "Coat×2, Shirt×1"
    assert makeup_text(None, [0]) == "" and makeup_text(labels, []) == ""


def test_a_comparison_folder_shows_its_grids_inline(toy_run):
    comp = ComparisonRun(toy_run.comp())
    page = comp._repr_html_()
    tags = parsed(page)
    n_grids = sum(len(comp.grid_paths(m, d)) for m, res in comp.results().items()
                  for d in res.directions)
    assert n_grids > 0 and len(tags.imgs) == n_grids
    for img in tags.imgs:                     # the pictures travel with the notebook
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for name in comp.results():
        assert f"<b>{name}</b>" in page
    assert str(toy_run.root) not in page      # no absolute path of this machine
    if comp.labels is not None:
        assert "grid&#x27;s classes" in page and "cluster&#x27;s classes" in page


def test_an_empty_comparison_says_so(tmp_path, toy_run):
    import shutil
    dest = tmp_path / "c"
    dest.mkdir()
    shutil.copy(toy_run.comp() / "run.json", dest / "run.json")
    assert "no finished method" in ComparisonRun(dest)._repr_html_()
