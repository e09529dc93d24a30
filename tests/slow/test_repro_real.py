"""The slow half of tests/process/test_repro.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
import pytest
from bisector.repro.compose import repro_script
from bisector.store.storage import Store

from tests.process.test_repro import PROBES, _cli, _probe_result, ga_job, ga_result, tiny_index  # noqa: F401 (helpers and fixtures)


@pytest.mark.parametrize("args", [("--loop=accelerate", "--sizes=64,128"),
                                  ("--loop=trainer", "--sizes=64", "--precision-via=env")])
def test_the_ga_memory_script_measures_the_bytes_the_probe_measures(tmp_path, args):
    """The script and the probe, in this interpreter (torch, transformers, accelerate): the same peak in
    every cell, to the byte, and the same derived metrics."""
    probe = _probe_result(tmp_path, *args)
    result = ga_result(probe["probe"]["config"]).model_copy(update={"metric": "ga_cost_bytes_per_param"})
    job = ga_job(args=list(args))
    script = tmp_path / "repro.py"
    script.write_text(repro_script(result, job, script.name).text)
    out = tmp_path / "script.json"
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "BISECTOR_RESULT": str(out)})
    assert ran.returncode == 0, ran.stderr
    mine, theirs = json.loads(out.read_text())["metrics"], probe["metrics"]
    assert mine and set(mine) <= set(theirs)
    assert {k: mine[k] for k in mine} == pytest.approx({k: theirs[k] for k in mine}, rel=1e-12, abs=1e-9)
    assert any(k.startswith("peak_bytes.bf16.ga2") for k in mine) and "ga_cost_bytes_per_param" in mine
    alone = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                           env={k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"})
    verdict = "BAD" if theirs["ga_cost_bytes_per_param"] > 0.5 else "GOOD"
    assert alone.stdout.startswith(f"ga_cost_bytes_per_param = {theirs['ga_cost_bytes_per_param']:.3f} B/param: {verdict}")
    assert alone.returncode == (1 if verdict == "BAD" else 0) and "cell 1/" in alone.stderr


@pytest.mark.parametrize("probe", [("--probe", str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib",
                                    "--threshold", "200"), ("--probe-cmd", f"sh {PROBES / 'tiny_exitcode.sh'}")])
def test_the_repro_is_verified_in_both_environments_and_recorded_in_the_run(probe, tiny_index, tmp_path, env_cache,
                                                                          plain_spec):
    store = str(tmp_path / "s.db")
    common = ["--store", store]
    ran = _cli("run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0", "--bad", "1.5", "--index-url",
               tiny_index, *probe, "--env", str(plain_spec), "--cache-dir", str(env_cache), *common)
    assert ran.returncode == 0, ran.stderr
    shell = probe[0] == "--probe-cmd"
    script = tmp_path / ("repro.sh" if shell else "repro.py")
    made = _cli("report", "--repro", str(script), "--format", "json", *common)
    assert made.returncode == 0, made.stderr
    repro = json.loads(made.stdout)["repro"]
    assert repro["verified"] is True and repro["path"] == str(script)
    assert (repro["last_good"]["verdict"], repro["first_bad"]["verdict"]) == ("good", "bad")
    if not shell:
        assert (repro["last_good"]["value"], repro["first_bad"]["value"]) == (100.0, 400.0)
    stored = json.loads(_cli("report", "--format", "json", *common).stdout)
    assert stored["repro"] == repro   # in the run, and in its report files
    reports = Path(store).parent / "reports"
    assert "reproduces it: " in (reports / f"{stored['run_id']}.md").read_text()
    md = _cli("report", *common).stdout
    assert f"**Reproduce:** The attached script `{script.name}` reproduces it" in md.split("<details>")[0]
    again = _cli("report", "--repro", str(script), "--format", "json", *common)
    assert json.loads(again.stdout)["repro"] == repro and "probing" not in again.stderr   # stored: nothing reran


def test_a_script_that_does_not_show_the_step_is_not_verified(tiny_index, tmp_path, env_cache, plain_spec):
    store = tmp_path / "s.db"
    ran = _cli("run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0", "--bad", "1.5", "--index-url",
               tiny_index, "--probe", str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200",
               "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store", str(store), "--json")
    run_id = json.loads(ran.stdout)["run_id"]
    db = Store(store)   # as if the run's threshold had been another: the script judges by it and sees no step
    row = db.get_run(run_id)
    db.put_run(row.model_copy(update={"result": {**row.result, "threshold": 1000.0}}))
    db.close()
    made = _cli("report", "--repro", str(tmp_path / "repro.py"), "--format", "json", "--store", str(store))
    assert made.returncode == 3, made.stderr
    repro = json.loads(made.stdout)["repro"]
    assert repro["verified"] is False and repro["first_bad"] == {"value": 400.0, "verdict": "good", "reason": None}
    assert "does not reproduce it" in _cli("report", "--store", str(store)).stdout
