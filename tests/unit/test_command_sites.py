"""Where a user's program held its step peak: the command meter's sites (``_meters/site_bytes.py``, ``sites.SitePicker``),
the step records turned into the result's ``sites`` (``command/_sites.py``), and what ``--explain`` and the report
say of them (``bisector/explain/command_sites.py``). In-process, on real tensors."""
from __future__ import annotations

import importlib.util
import sys
import textwrap
import inspect
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

PROBES = Path(__file__).resolve().parents[2] / "probes"
sys.path[:0] = [str(PROBES), str(PROBES / "command")]
from _meters.site_bytes import SiteBytes  # noqa: E402
from _meters.sites import SitePicker  # noqa: E402
from _sites import peak_sites  # noqa: E402

from bisector.explain.command_run import CommandExplainer  # noqa: E402

MIB = 1 << 20


def _package(tmp_path: Path) -> Path:
    """A package under test with a function that allocates a 4 MiB buffer, imported from ``tmp_path``."""
    root = tmp_path / "undertest"
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent("""
        import torch

        def helper(n):
            return torch.zeros(n, dtype=torch.int64)   # the innermost frame of the package: the site

        def make_mask():
            mask = helper(512 * 1024)       # 4 MiB of int64
            small = torch.ones(10)          # under the floor: pooled
            return mask, small
        """))
    spec = importlib.util.spec_from_file_location("undertest", root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_peak_s_rows_name_the_package_s_frame_pool_the_small_ones_and_sum_to_the_peak(tmp_path):
    module = _package(tmp_path)
    # (pytest runs from site-packages: this file is named a package too, or its frames would be pytest's)
    counter = SiteBytes("cpu", min_bytes=MIB, picker=SitePicker([str(tmp_path / "undertest"), __file__]))
    with counter:
        mask, small = module.make_mask()
        other = torch.empty(2 * MIB, dtype=torch.uint8)   # this file's own
        peak_then = counter.current
        del mask, other   # freed after the peak: the peak's rows keep them
        after = torch.ones(300)
        peak, end = counter.reset_window()
    assert peak == peak_then and end == counter.current
    rows = counter.window_sites
    assert sum(r[1] for r in rows) == peak   # to the byte
    by_site = {r[0]: r for r in rows}
    mask_site = next(s for s in by_site if "undertest" in s or "__init__.py" in s)
    assert mask_site.startswith("int64 | ") and mask_site.endswith("__init__.py:5 helper")   # the package's line
    assert by_site[mask_site][1:] == [4 * MIB, 1, "int64 524288"]
    own = next(s for s in by_site if "test_command_sites.py" in s)
    assert own.startswith("uint8 | ") and by_site[own][1] == 2 * MIB
    smaller = next(r for r in rows if r[0].startswith("smaller allocations"))
    assert smaller[0] == "smaller allocations (< 1 MiB each)" and 40 <= smaller[1] < 4096
    # the next window opens at what is live now: the freed buffers are gone from it
    with counter:
        peak, _ = counter.reset_window()
    assert [r[0] for r in counter.window_sites] == ["smaller allocations (< 1 MiB each)"]
    assert counter.window_sites[0][1] == peak
    counter._live.close()
    del after, small


def test_the_peak_s_table_is_not_changed_by_what_happens_after_it(tmp_path):
    """Copy on write: a placed storage born or freed after the peak changes the live table, not the peak's."""
    counter = SiteBytes("cpu", min_bytes=MIB, picker=SitePicker([__file__]))
    with counter:
        a = torch.empty(3 * MIB, dtype=torch.uint8)
        b = torch.empty(2 * MIB, dtype=torch.uint8)
        del a
        c = torch.empty(1 * MIB, dtype=torch.uint8)   # below the peak: a new site, not in the peak's rows
        peak, _ = counter.reset_window()
    assert peak >= 5 * MIB and sum(r[1] for r in counter.window_sites) == peak
    lines = sorted(r[1] for r in counter.window_sites if r[2])
    assert lines == [2 * MIB, 3 * MIB]
    counter._live.close()
    del b, c


def test_without_a_frame_in_the_package_the_site_is_the_outermost_library_frame_else_the_program_s_own_line():
    picker = SitePicker(["/nowhere/pkg"])
    # where the test runner entered a library: pytest's own frame, or execnet's under xdist
    outermost = [f.filename for f in inspect.stack() if "site-packages" in f.filename][-1]
    assert picker.where().startswith(outermost.rpartition("site-packages/")[2] + ":")
    found = []

    def own_program():   # a thread's stack: this function, then the standard library's threading
        found.append(picker.where())

    thread = threading.Thread(target=own_program)
    thread.start()
    thread.join()
    assert found[0].startswith("test_command_sites.py:") and found[0].endswith(" own_program")


def _step(i, peak, sites=None):
    out = {"i": i, "peak_bytes": peak}
    return {**out, "sites": sites} if sites is not None else out


def test_the_result_s_sites_are_those_of_the_measured_step_at_the_peak_filled_forward():
    rows = [["int64 | pkg/mod.py:9 make_mask", 4 * MIB, 1, "int64 524288"], ["smaller allocations (< 1 MiB each)", 100, None, None]]
    warm = [["float32 | pkg/mod.py:3 init", 9 * MIB, 2, "float32 100"]]
    procs = {7: {"steps": [_step(0, 9 * MIB, warm), _step(1, 4 * MIB + 100, rows), _step(2, 4 * MIB + 100)]}}
    facts = {"ranks": [{"rank": 0, "pid": 7, "metrics": {"step_peak_bytes": 4 * MIB + 100}}]}
    found = peak_sites(procs, facts, {"step_peak_bytes": 4 * MIB + 100}, skip=1)
    assert found["step"] == 1 and found["rank"] == 0
    assert found["rows"][0] == {"site": "int64 | pkg/mod.py:9 make_mask", "bytes": 4 * MIB, "storages": 1,
                                "largest": "int64 524288"}
    assert found["rows"][1] == {"site": "smaller allocations (< 1 MiB each)", "bytes": 100}
    # step 2 carried no rows of its own: it has step 1's
    procs[7]["steps"][1]["peak_bytes"] = 1
    assert peak_sites(procs, facts, {"step_peak_bytes": 4 * MIB + 100}, skip=1)["step"] == 2
    assert peak_sites(procs, facts, {}, skip=1) is None   # no step peak (CUDA, rss, no step): no sites


def _result(rows, step=1):
    return {"schema_version": "command/1", "metrics": {}, "steps": [],
            "sites": {"step": step, "rows": [dict(zip(("site", "bytes", "storages", "largest"), r)) for r in rows]}}


def test_explain_names_the_sites_that_grew_with_the_first_bad_s_line():
    e = CommandExplainer()
    good = e.compact(_result([["smaller allocations (< 1 MiB each)", 12 * MIB, None, None]]))
    bad = e.compact(_result([
        ["float32 | transformers/models/llama/modeling_llama.py:1087 _update_causal_mask", 96 * MIB, 3,
         "float32 2x1x2048x2048"],
        ["float32 | transformers/models/llama/modeling_llama.py:400 forward", 8 * MIB, 2, "float32 2x64x256"],
        ["smaller allocations (< 1 MiB each)", 12 * MIB + 5000, None, None]]))
    good["sites"].append(["float32 | transformers/models/llama/modeling_llama.py:380 forward", 8 * MIB, "float32 2x64x256", 2])
    lines = e.explain({"step_peak_bytes": 20.0 * MIB}, {"step_peak_bytes": 116.0 * MIB}, "step_peak_bytes", good, bad)
    said = lines[-1]
    assert said == ("At the step peak, by allocation site (last good → first bad): "
                    "transformers/models/llama/modeling_llama.py:1087 _update_causal_mask (3 float32 storages, the "
                    "largest [2, 1, 2048, 2048]) grew by 96.00 MiB (0 B → 96.00 MiB); smaller allocations (< 1 MiB "
                    "each) grew by 4.88 KiB (12.00 MiB → 12.00 MiB).")   # forward moved lines, not bytes: not named
    one = e.one_version({}, bad, None)
    assert one[-1].startswith("At the step peak (step 1), by allocation site: transformers/models/llama/"
                              "modeling_llama.py:1087 _update_causal_mask (3 float32 storages, the largest "
                              "[2, 1, 2048, 2048]) 96.00 MiB; smaller allocations")
    assert e.explain({"step_peak_bytes": 1.0}, {"step_peak_bytes": 2.0}, "step_peak_bytes", {}, bad)[-1:] != [said]
