"""The CI recipe is tested: the CPU job of examples/nightly-matrix.yml, its "Run the matrix" and "Alert"
steps run by bash exactly as they are written there (GitHub's expressions filled in as a scheduled run
has them, ``bisector`` on PATH), over examples/matrix-cpu.toml on the real package index, two nights.
The first night lists the invalid pair before anything is built and measures every valid cell (one
needs its companions as of the newest pinned release's date), the second takes them from the store;
both exit 0 and leave the report, the history page and the issue-draft folder to upload
(BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml
from tests.support.venvs import venv_over_this_interpreter

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "nightly-matrix.yml"
JOB = "matrix-cpu"


def job(name: str = JOB, workflow: Path = WORKFLOW) -> dict:
    return yaml.safe_load(workflow.read_text())["jobs"][name]


def step(name: str, job_name: str = JOB, workflow: Path = WORKFLOW) -> dict:
    return next(s for s in job(job_name, workflow)["steps"] if s.get("name") == name)


def expand(text: str, context: dict[str, str]) -> str:
    """GitHub's ``${{ expr }}`` with the values of ``context`` (``a || 'default'``: a's value unless it is
    empty); an expression it lacks fails the test."""
    def one(m: re.Match) -> str:
        first, _, default = m[1].partition(" || ")
        assert first in context, f"the workflow uses ${{{{ {m[1]} }}}}, which this test does not know"
        return context[first] or default.strip("'")
    return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", one, text)


def run_step(name: str, workspace: Path, context: dict[str, str], extra_env: dict[str, str], job_name: str = JOB,
             workflow: Path = WORKFLOW) -> subprocess.CompletedProcess:
    given = {**job(job_name, workflow)["env"], **(step(name, job_name, workflow).get("env") or {})}   # job, then step
    env = {**os.environ, **{k: expand(str(v), context) for k, v in given.items()}, **extra_env}
    return subprocess.run(["bash", "-e", "-c", expand(step(name, job_name, workflow)["run"], context)], cwd=workspace,
                          env=env, capture_output=True, text=True, timeout=1500)


def test_the_workflow_drops_in_installs_bisector_not_the_host_and_pastes_no_input_into_bash(tmp_path):
    """It installs bisector from BISECTOR_SOURCE (the host repository is not bisector), the CPU job's torch
    is the pinned CPU build from PyTorch's CPU index, and a dispatch input reaches bash only through the
    environment (an expression in a script is pasted into it before bash runs: a quote in it is code)."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for name, j in workflow["jobs"].items():
        for s in j["steps"]:
            run = s.get("run", "")
            assert not re.search(r"\$\{\{\s*(github\.event|inputs|vars)\.", run), (name, s.get("name"))
            assert not re.search(r"pip install[^\n]*\s\.(\s|$)", run), (name, "installs the host repository")
        install = next(s for s in j["steps"] if s.get("name") == "Install bisector")["run"]
        assert '"$BISECTOR_SOURCE"' in install and j["env"]["BISECTOR_SOURCE"] == "${{ vars.BISECTOR_SOURCE }}"
    cpu, gpu = job(), job("matrix-gpu")
    assert cpu["env"]["TORCH"].endswith("+cpu") and not gpu["env"]["TORCH"].endswith("+cpu")   # each its torch
    assert expand(cpu["env"]["TORCH_INDEX"], {"vars.TORCH_INDEX": ""}) == "https://download.pytorch.org/whl/cpu"
    assert "/whl/cu" in expand(gpu["env"]["TORCH_INDEX"], {"vars.TORCH_CUDA_INDEX": ""})
    for name in (JOB, "matrix-gpu"):
        install = step("Install bisector", name)["run"]
        assert '-m pip install "torch==$TORCH" "${torch_index[@]}"' in install, name
        assert install.index('"torch==$TORCH"') < install.index('pip install "$BISECTOR_SOURCE"'), name
    assert "PIP_EXTRA_INDEX_URL" not in cpu["env"]
    # unset, the install stops with one annotated line before anything is installed
    context = {"github.workspace": str(tmp_path), "vars.BISECTOR_SOURCE": "", "vars.TORCH_INDEX": ""}
    done = run_step("Install bisector", tmp_path, context, {})
    assert done.returncode == 2 and done.stdout.startswith("::error::set the repository variable BISECTOR_SOURCE")
    # a hostile baseline stays one argument: it reaches bisector as typed, never run by bash
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bisector").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (bin_dir / "bisector").chmod(0o755)
    hostile = 'x"; touch pwned; echo "'
    context["github.event.inputs.baseline"] = hostile
    done = run_step("Run the matrix", tmp_path, context,
                    {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "ARGS_OUT": str(tmp_path / "args"),
                     "GITHUB_OUTPUT": str(tmp_path / "out"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")})
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--baseline") + 1] == hostile and not (tmp_path / "pwned").exists()


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




def test_the_gpu_job_fails_in_one_line_on_a_torch_that_is_not_a_cuda_build(tmp_path):
    """The GPU job's check, run as written in a workspace whose .venv has this machine's CPU torch."""
    venv_over_this_interpreter(tmp_path / ".venv")
    context = {"vars.BISECTOR_SOURCE": "", "vars.TORCH_CUDA_INDEX": ""}
    done = run_step("Check the torch is a CUDA build", tmp_path, context, {"PYTHONPATH": ""}, job_name="matrix-gpu")
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("::error::torch 2.13.0+cpu is not a CUDA build"), done.stderr
