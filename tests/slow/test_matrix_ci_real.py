"""The slow half of tests/process/test_matrix_ci.py: the CPU job of examples/nightly-matrix.yml in a scratch
git repository that is not bisector's (the workflow at .github/workflows/, the example's matrix file, a
bisector wheel built from this tree committed beside them): its "Install bisector" step as written, with
BISECTOR_SOURCE naming that wheel and TORCH_INDEX=pip.conf (the CPU torch 2.13.0+cpu as pip's configuration
offers it: no download), then "Run the matrix" with the bisector it installed, two nights."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.process.test_matrix_ci import ROOT, WORKFLOW, run_step
from tests.support.venvs import venv_over_this_interpreter

GIT = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "-c", "commit.gpgsign=false"]


@pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")
def test_the_cpu_job_installs_bisector_from_its_source_and_runs_as_written_two_nights(tmp_path):
    workspace = tmp_path / "host"
    (workspace / "examples").mkdir(parents=True)
    (workspace / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "matrix-cpu.toml", workspace / "examples")
    workflow = workspace / ".github" / "workflows" / "nightly-matrix.yml"
    shutil.copy(WORKFLOW, workflow)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(workspace / "wheels")],
                   check=True, capture_output=True)
    (wheel,) = (workspace / "wheels").glob("ml_bisector-*.whl")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run([*GIT, "-C", str(workspace), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(workspace), "commit", "-qm", "a project's nightly matrix"], check=True)
    assert not (workspace / "pyproject.toml").exists()          # the host is not bisector
    # setup-python's `python`: a fresh venv over this interpreter's packages (the shared CPU torch among them)
    venv = tmp_path / "python"
    venv_over_this_interpreter(venv, pip=True)
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": ""}
    context = {"github.workspace": str(workspace), "github.event.inputs.baseline": "",
               "vars.BISECTOR_SOURCE": f"wheels/{wheel.name}", "vars.TORCH_INDEX": "pip.conf"}
    done = run_step("Install bisector", workspace, context, env, workflow=workflow)
    assert done.returncode == 0, done.stderr[-3000:]
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import bisector, torch, importlib.metadata as m; "
                            "print(bisector.__file__, torch.__version__, m.version('ml-bisector'))"],
                           capture_output=True, text=True, check=True, env={**os.environ, **env}, cwd=tmp_path).stdout
    assert where.startswith(str(venv)) and where.split()[1:] == ["2.13.0+cpu", "0.1.0"], where
    assert shutil.which("bisector", path=env["PATH"]) == str(venv / "bin" / "bisector")
    nights = []
    for night in (1, 2):
        output, summary = tmp_path / f"output{night}", tmp_path / f"summary{night}"
        done = run_step("Run the matrix", workspace, context,
                        {**env, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}, workflow=workflow)
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
