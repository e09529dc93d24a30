"""The layout shows the design, and keeps showing it: the top of bisector/ holds only its face and leaves,
each package imports only from the layers below it, and envs/ is entered through its face only.

Imports are read with ``ast`` from the source (every ``import`` / ``from ... import`` statement, also
those inside functions), so a lazy import counts as much as a top-level one.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "bisector"

TOP_MODULES = {"__init__", "__main__", "errors", "paths", "redact"}
TOP_LIMIT = 23   # (repro/ joined the 22 in issue 46: the repro is its own stage, not a third of bisection/)
BUILD_LIKE = {"build", "dist", "out", "target", "_build", "site-packages", "node_modules", "generated"}

# bisector's packages and leaf modules, top layer first; each may import only from layers below it
LAYERS = [
    ["cli"],
    ["matrix", "difference", "repro"],
    ["bisection"],
    ["decide"],
    ["report"],
    ["explain"],
    ["measure"],
    ["envs"],
    ["sources"],
    ["job"],
    ["store"],
    ["console"],
    ["process"],
    ["core"],
    ["redact"],
    ["safety"],
    ["data", "paths"],
    ["errors"],
]
# envs/'s sub-packages, top first; ``model`` at the bottom imports none of the others
ENVS_LAYERS = [["manager"], ["cache"], ["builders"], ["check"], ["tooling"], ["model"]]


def _imports(path: Path) -> Iterator[str]:
    """Every bisector module a file imports (``from bisector import x`` as ``bisector.x``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "bisector")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "bisector":
                yield from (f"bisector.{a.name}" for a in node.names)
            elif node.module.startswith("bisector."):
                yield node.module


def _module(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _rank(layers: list[list[str]]) -> dict[str, int]:
    return {name: i for i, layer in enumerate(layers) for name in layer}


def _edges(files: list[Path], part: int, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(file, its room, the imported room), where a room is the ``part``-th dotted part of a module."""
    out = []
    for path in files:
        src = _module(path, root).split(".")
        for target in _imports(path):
            dst = target.split(".")
            if len(src) > part and len(dst) > part:
                out.append((str(path.relative_to(root)), src[part], dst[part]))
    return out


def _upward(files: list[Path], part: int, layers: list[list[str]], root: Path = ROOT) -> list[str]:
    """Each import of a room from a room at its own layer or above."""
    rank = _rank(layers)
    return [f"{f}: {a} -> {b}" for f, a, b in _edges(files, part, root)
            if a != b and a in rank and b in rank and rank[b] <= rank[a]]


def test_the_top_of_bisector_holds_its_face_and_leaves_only():
    modules = {p.stem for p in PKG.glob("*.py")}
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    assert modules <= TOP_MODULES, sorted(modules - TOP_MODULES)
    assert len(modules) + len(packages) <= TOP_LIMIT, sorted(modules | packages)
    stray = [p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__" and p.name not in packages]
    assert not stray, f"folders without __init__.py: {stray}"


def test_no_folder_is_named_like_build_output():
    folders = [p for p in PKG.rglob("*") if p.is_dir() and p.name in BUILD_LIKE]
    assert not folders, folders


def test_every_room_of_bisector_has_its_layer():
    rooms = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.name not in ("__init__.py", "__main__.py")}
    assert rooms == set(_rank(LAYERS)), (sorted(rooms - set(_rank(LAYERS))), sorted(set(_rank(LAYERS)) - rooms))


def test_each_package_imports_only_from_the_layers_below_it():
    files = [p for p in PKG.rglob("*.py") if p.parent != PKG or p.stem not in ("__init__", "__main__")]
    assert len(_edges(files, 1)) > 500   # the check reads the real imports
    wrong = _upward(files, 1, LAYERS)
    assert not wrong, "\n".join(wrong)


def test_envs_sub_packages_import_only_those_below_them():
    files = list((PKG / "envs").rglob("*.py"))
    wrong = _upward(files, 2, ENVS_LAYERS)
    assert not wrong, "\n".join(wrong)
    model = [f for f, a, b in _edges(files, 2) if a == "model" and b != "model" and b in _rank(ENVS_LAYERS)]
    assert not model, model


@pytest.mark.parametrize("tree", ["bisector", "bench", "acceptance"])
def test_code_outside_envs_enters_it_through_its_face(tree):
    files = [p for p in (ROOT / tree).rglob("*.py") if PKG / "envs" not in p.parents]
    reach = [f"{p.relative_to(ROOT)}: {t}" for p in files for t in _imports(p) if t.startswith("bisector.envs.")]
    assert not reach, "\n".join(reach)


def test_the_layer_check_sees_an_upward_import_even_inside_a_function(tmp_path):
    """The rule can fail: a core module importing the measuring layer lazily is an upward arrow, and an
    envs/model module importing a builder is one too."""
    core = tmp_path / "bisector" / "core"
    core.mkdir(parents=True)
    (core / "x.py").write_text("def f():\n    from bisector.measure.measurer import Measurer\n")
    (core / "y.py").write_text("from bisector.errors import UsageError\n")
    assert _upward(sorted(core.glob("*.py")), 1, LAYERS, tmp_path) == ["bisector/core/x.py: core -> measure"]
    model = tmp_path / "bisector" / "envs" / "model"
    model.mkdir(parents=True)
    (model / "z.py").write_text("import bisector.envs.builders.backends\n")
    assert _upward([model / "z.py"], 2, ENVS_LAYERS, tmp_path) == ["bisector/envs/model/z.py: model -> builders"]
