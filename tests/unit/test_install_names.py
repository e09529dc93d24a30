"""No doc, example, repro or message names the unpublished distribution as something to install: its name
(pyproject's, and `bisector`, the command's, which the index holds for another project) is on no package
index bisector could install from, so `pip install ml-bisector`, `'bisector[ray]'`, `uv tool install
bisector` or `pipx inject VENV bisector` would fail or install something else. `pipx inject ml-bisector X`
(the installed venv's name) and installs from a path, `.` or a git URL are what works."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = False   # set when the distribution is on the package index (bench/name_on_index.py says so)
DIST = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
NAMES = {canonicalize_name(DIST), "bisector"}
FILES = [ROOT / "README.md", ROOT / "probes" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "examples").iterdir()), *sorted((ROOT / "bisector").rglob("*.py")),
         *sorted((ROOT / "bench").rglob("*.py")), ROOT / ".ci" / "run"]
VERB = re.compile(r"\b(?:(?:pip3?|pipx|uv(?:\s+pip|\s+tool)?)\s+(?:install|add|inject\s+\S+)|--with)\s+(.*)")
STOP = re.compile(r"\s(?:#|;|&&|\|\|?)\s|[`)]")


def installs_by_name(line: str) -> list[str]:
    """The words of an install command on this line that name the distribution (or `bisector`) as a package."""
    out = []
    for m in VERB.finditer(line):
        command = STOP.split(m[1] + " ", 1)[0]
        for word in command.split():
            bare = re.split(r"[\[=<>~!;@ ]", word.strip("'\""), 1)[0]
            if bare and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", bare) and canonicalize_name(bare) in NAMES:
                out.append(word)
    return out


def test_the_check_sees_each_way_of_naming_it():
    for bad in ("pip install ml-bisector", "pip install 'bisector[ray]'", "uv tool install bisector",
                "pipx inject ml-bisector bisector", "uv tool install --python 3.11 ml_bisector==0.1.0",
                "run `pipx install ml-bisector` first"):
        assert installs_by_name(bad), bad
    for fine in ("pipx inject ml-bisector torch==2.13.0+cpu", "pip install .", "uv tool install . --with torch",
                 "python -m pip install \"$BISECTOR_SOURCE\"", "pip install git+https://h/o/bisector@v1",
                 "pipx install ./dist/ml_bisector-0.1.0-py3-none-any.whl", "uv tool install --reinstall /src/b --with x",
                 "the bisector install route", "install one next to bisector (x)", "install ray next to bisector"):
        assert not installs_by_name(fine), fine


@pytest.mark.skipif(PUBLISHED, reason="the distribution is on the index")
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_installs_the_unpublished_distribution_by_name(path):
    found = [(i + 1, line.strip()) for i, line in enumerate(path.read_text().splitlines()) if installs_by_name(line)]
    assert found == [], f"{path.relative_to(ROOT)} names {DIST} as a package to install: {found[:3]}"
