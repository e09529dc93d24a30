"""The slow half of tests/process/test_matrix_ci.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import shutil
import sys
import pytest

from tests.process.test_matrix_ci import ROOT, run_step  # noqa: F401 (helpers and fixtures)


@pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")
def test_the_cpu_job_runs_as_written_two_nights(tmp_path):
    workspace = tmp_path / "repo"
    (workspace / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "matrix-cpu.toml", workspace / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bisector").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bisector "$@"\n')
    (bin_dir / "bisector").chmod(0o755)
    context = {"github.workspace": str(workspace), "github.event.inputs.baseline": "", "vars.BISECTOR_SOURCE": ""}
    nights = []
    for night in (1, 2):
        output, summary = tmp_path / f"output{night}", tmp_path / f"summary{night}"
        done = run_step("Run the matrix", workspace, context,
                        {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
                         "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)})
        assert done.returncode == 0, done.stderr[-3000:]
        out = workspace / "bisector-matrix"
        nights.append({"stderr": done.stderr, "output": output.read_text(), "summary": summary.read_text(),
                       "json": json.loads((out / "matrix.json").read_text()), "page": (out / "html" / "index.html")})
    for n in nights:
        assert n["output"] == "exit_code=0\n" and n["json"]["exit_code"] == 0
        assert n["summary"].startswith("# Version matrix: accelerate") and n["page"].is_file()
        assert [c["versions"] for c in n["json"]["invalid"]] == [{"accelerate": "0.20.0", "transformers": "4.32.1"}]
        cells = {c["versions"]["transformers"]: c for c in n["json"]["cells"]}
        assert sorted(cells) == ["4.32.1", "4.40.0"] and all(c["status"] == "ok" for c in cells.values())
        assert n["json"]["excluded"] == 1 and n["json"]["cells_lost"] == 0
    first = nights[0]["stderr"]
    assert first.index("not a valid combination: accelerate==0.20.0, transformers==4.32.1") < first.index("  cell ")
    assert nights[0]["json"]["probes_run"] == 2 and nights[1]["json"]["probes_run"] == 0
    assert nights[1]["json"]["baseline_run"] == nights[0]["json"]["run_id"]
