"""The CI recipe is tested: the CPU job of examples/nightly-matrix.yml, its "Run the matrix" and "Alert"
steps run by bash exactly as they are written there (GitHub's expressions filled in as a scheduled run
has them, ``bisector`` on PATH), over examples/matrix-cpu.toml on the real package index, two nights.
The first night lists the invalid pair before anything is built and measures every valid cell (one
needs its companions as of the newest pinned release's date), the second takes them from the store;
both exit 0 and leave the report, the history page and the issue-draft folder to upload
(BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "nightly-matrix.yml"
JOB = "matrix-cpu"


def job() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"][JOB]


def step(name: str) -> dict:
    return next(s for s in job()["steps"] if s.get("name") == name)


def expand(text: str, context: dict[str, str]) -> str:
    """GitHub's ``${{ expr }}`` with the values of ``context``; an expression it lacks fails the test."""
    def one(m: re.Match) -> str:
        assert m[1] in context, f"the workflow uses ${{{{ {m[1]} }}}}, which this test does not know"
        return context[m[1]]
    return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", one, text)


def run_step(name: str, workspace: Path, context: dict[str, str], extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **{k: expand(str(v), context) for k, v in job()["env"].items()}, **extra_env}
    return subprocess.run(["bash", "-e", "-c", expand(step(name)["run"], context)], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=1500)


def test_the_workflow_uploads_the_page_and_the_drafts_and_alerts_on_every_code():
    env, upload = job()["env"], step("Upload the report, the history page and the issue drafts")
    assert upload["if"] == "always()" and upload["with"]["path"] == "${{ env.MATRIX_OUT }}/"
    run = step("Run the matrix")["run"]
    assert '--html "$MATRIX_OUT/html"' in run and '--issues "$MATRIX_OUT/issues"' in run
    assert env["MATRIX_CONFIG"] == "examples/matrix-cpu.toml" and (ROOT / env["MATRIX_CONFIG"]).is_file()
    assert step("Save the matrix history")["if"] == "always()"
    gpu = yaml.safe_load(WORKFLOW.read_text())["jobs"]["matrix-gpu"]
    assert [s["run"] for s in gpu["steps"] if s.get("name") == "Alert"] == [step("Alert")["run"]]
    for code, said in (("1", "confirmed regression"), ("3", "nothing could be measured"), ("4", "cells lost")):
        context = {"steps.matrix.outputs.exit_code": code}
        done = subprocess.run(["bash", "-e", "-c", expand(step("Alert")["run"], context)], capture_output=True, text=True)
        assert done.returncode == 1 and done.stdout.startswith(f"::error::bisector matrix: {said}"), done.stdout


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")
def test_the_cpu_job_runs_as_written_two_nights(tmp_path):
    workspace = tmp_path / "repo"
    (workspace / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "matrix-cpu.toml", workspace / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bisector").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bisector "$@"\n')
    (bin_dir / "bisector").chmod(0o755)
    context = {"github.workspace": str(workspace), "github.event.inputs.baseline": "", "vars.TORCH_CPU_INDEX_URL": ""}
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
