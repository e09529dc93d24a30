"""What a built-in probe is made of: its own files, the contract and the modules of the probes' meter library it
uses (followed through their imports, module by module), so its fingerprint changes with exactly the code it
runs; ga_memory in sub-packages (at most 12 files at its top); every import a probe file makes resolves where it
runs (its own directory and probes/ on ``sys.path``), and none is bisector's."""
from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from bisector.data import probes_dir
from bisector.job.probe_code import builtin_files, shared_modules
from bisector.job.probe import BuiltinProbe, ProgramProbe, builtin_script

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "probes"
METERS = {"_meters/__init__.py", "_meters/cgroup.py", "_meters/cpu.py", "_meters/cuda.py", "_meters/fake_mode.py",
          "_meters/fake_reads.py", "_meters/phases.py", "_meters/sites.py", "_meters/tensor_bytes.py"}


def _files(name: str) -> set[str]:
    root = probes_dir()
    return {f.relative_to(root).as_posix() for f in builtin_files(builtin_script(name))}


def test_ga_memory_keeps_at_most_12_files_at_its_top_and_its_helpers_in_sub_packages():
    top = [p.name for p in (PROBES / "ga_memory").iterdir() if p.is_file()]
    assert len(top) <= 12, sorted(top)
    assert {"__main__.py", "_preflight.py"} <= set(top)   # the script and the host's check of its arguments
    for package in ("_allocator_model", "_models", "_training"):
        assert (PROBES / "ga_memory" / package / "__init__.py").is_file()


def test_each_probe_depends_on_its_own_files_the_contract_and_the_meter_modules_it_uses():
    ga = _files("ga_memory")
    own = {p.relative_to(PROBES).as_posix() for p in (PROBES / "ga_memory").rglob("*.py")}
    assert ga == own | METERS | {"_probe_contract.py"}
    assert "ga_memory/_allocator_model/model.py" in ga and "ga_memory/_training/trainer_loop.py" in ga
    assert _files("command") == {f"command/{name}.py" for name in (
        "__main__", "_aggregate", "_fake", "_fake_stop", "_inprocess", "_launch", "_numerics", "_package_dirs", "_parts",
        "_records", "_sites", "_step_numbers", "_torch_hook", "_update_copy")} | {
        "_meters/__init__.py", "_meters/cgroup.py", "_meters/tensor_bytes.py", "_meters/site_bytes.py", "_meters/sites.py",
        "_meters/cuda.py", "_meters/phases.py", "_meters/fake_reads.py", "_probe_contract.py"}
    assert _files("step_time") == {"step_time/__main__.py", "step_time/_machine.py", "step_time/_model.py",
                                   "_probe_contract.py"}
    assert _files("import_cost") == {"import_cost.py", "_probe_contract.py"}


@pytest.fixture
def probes_copy(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "probes"
    shutil.copytree(PROBES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("BISECTOR_PROBES_DIR", str(copy))
    return copy


def _prints() -> dict[str, str]:
    return {n: (ProgramProbe(command=["python", "x.py"]) if n == "command" else BuiltinProbe(name=n)).fingerprint()
            for n in ("ga_memory", "command", "step_time", "import_cost")}


@pytest.mark.parametrize("changed, moves", [
    ("_meters/cpu.py", {"ga_memory"}),                    # the CPU phase meter: ga_memory's only
    ("_meters/fake_reads.py", {"ga_memory", "command"}),   # fake mode's value reads: both meters' --fake
    ("_meters/site_bytes.py", {"command"}),               # the command meter's sites
    ("_meters/tensor_bytes.py", {"ga_memory", "command"}),  # the exact count both meters use
    ("ga_memory/_training/precision.py", {"ga_memory"}),   # a probe's own file, in a sub-package
    ("command/_aggregate.py", {"command"}),
    ("_probe_contract.py", {"ga_memory", "command", "step_time", "import_cost"}),
])
def test_a_change_moves_the_fingerprints_of_the_probes_that_run_it_and_no_other(probes_copy, changed, moves):
    before = _prints()
    with open(probes_copy / changed, "a") as fh:
        fh.write("\n# changed\n")
    after = _prints()
    assert {n for n in before if before[n] != after[n]} == moves


def test_a_shared_module_named_only_as_a_string_is_followed(probes_copy):
    """The command meter loads its library module by path, under a name of its own: the dotted name it gives
    is what the fingerprint follows (a new module of the library it does not name is not its)."""
    (probes_copy / "_meters" / "extra.py").write_text("X = 1\n")
    assert "_meters/extra.py" not in _files("command")
    inprocess = probes_copy / "command" / "_inprocess.py"
    inprocess.write_text(inprocess.read_text().replace('"_meters.site_bytes"', '"_meters.extra"'))
    files = _files("command")
    assert "_meters/extra.py" in files and "_meters/site_bytes.py" not in files


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            out.append((node.level, node.module or ""))
    return out


def _resolves(name: str, roots: list[Path]) -> bool:
    parts = name.split(".")
    return any((r.joinpath(*parts).with_suffix(".py")).is_file() or (r.joinpath(*parts) / "__init__.py").is_file()
               for r in roots)


def test_every_import_of_a_probe_file_resolves_where_it_runs_and_none_is_bisectors():
    shared = shared_modules()
    assert "_meters.cpu" in shared and "_probe_contract" in shared
    for path in sorted(PROBES.rglob("*.py")):
        rel = path.relative_to(PROBES)
        probe_dir = PROBES / rel.parts[0] if len(rel.parts) > 1 and not rel.parts[0].startswith("_") else PROBES
        for level, name in _imports(path):
            assert name.split(".")[0] != "bisector", f"{rel} imports {name}"
            if level:   # relative: inside its own package
                base = path.parent
                for _ in range(level - 1):
                    base = base.parent
                assert not name or _resolves(name, [base]), f"{rel}: from {'.' * level}{name}"
            elif name.startswith("_") and not name.startswith("__") and name not in sys.stdlib_module_names:
                assert _resolves(name, [probe_dir, PROBES]), f"{rel}: import {name}"
