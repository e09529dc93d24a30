"""pyproject's explicit package list is the tree's: every package under bisector/ ships, and the
built-in probes and specs (top-level probes/ and envs/) ship as bisector.data.probes / .specs."""
from __future__ import annotations

import tomllib
from pathlib import Path

from bisector.data import probes_dir, specs_dir

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tree_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "bisector").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
    assert listed - found == {"bisector.data.probes", "bisector.data.specs"}


def test_the_data_packages_are_the_top_level_probes_and_envs_in_a_checkout():
    assert probes_dir().resolve() == (ROOT / "probes").resolve()
    assert specs_dir().resolve() == (ROOT / "envs").resolve()
    assert (probes_dir() / "ga_memory" / "__main__.py").is_file()
    assert (specs_dir() / "default.toml").is_file()


def test_no_two_modules_share_a_basename():
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "bisector").rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        assert path.name not in seen, f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)}"
        seen[path.name] = path
