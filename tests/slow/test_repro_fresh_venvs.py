"""Issue 34, "the repro installs as printed, and verified means it": ``report --repro`` verifies the script in two
fresh virtual environments built by running its header's install lines exactly as printed (the tiny packages of a
loopback index, a commit bisect's local clone as ``$REPO_URL``, the bisect's own torch made visible instead of a
download), so a header whose lines would not make the bisect's environments is not verified; the record says what
stood in for what."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from bisector.repro.verify import verify
from bisector.repro.compose import repro_script
from bisector.core.result import BisectResult
from bisector.job.config import JobConfig
from bisector.store.storage import Store
from tests.process.test_repro import PROBES, _cli, tiny_index  # noqa: F401 (helpers and the index fixture)
from tests.support.gitfixture import make_repo

pytestmark = pytest.mark.slow
EXIT = "python -c 'import sys, tinypkg; sys.exit(tinypkg.step() > 200000)'"


def test_a_commit_bisect_s_repro_is_verified_in_venvs_made_by_its_own_lines(tmp_path, env_cache, plain_spec):
    repo, shas = make_repo(tmp_path, commits=6, bad_at=3)
    store = str(tmp_path / "s.db")
    ran = _cli("run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0], "--bad",
               shas[-1], "--env", str(plain_spec), "--probe-cmd", EXIT, "--store", store, "--cache-dir", str(env_cache))
    assert ran.returncode == 0, ran.stderr[-3000:]
    script = tmp_path / "repro.sh"
    made = _cli("report", "--repro", str(script), "--format", "json", "--store", store, "--cache-dir", str(env_cache))
    assert made.returncode == 0, made.stderr[-3000:]
    repro = json.loads(made.stdout)["repro"]
    assert repro["verified"] is True and (repro["last_good"]["verdict"], repro["first_bad"]["verdict"]) == ("good", "bad")
    assert repro["how"][0].startswith("the install lines ran as printed in fresh venvs")
    assert "REPO_URL = the bisect's local clone" in repro["how"] and any(h.startswith("torch = ") for h in repro["how"])
    text = script.read_text()
    assert str(repo) not in text and str(tmp_path) not in text   # no path of this machine in the script
    lines = [line[4:] for line in text.splitlines() if line.startswith("# $ ")]
    assert lines[0] == "python3 -m venv good" and lines[3] == "python3 -m venv bad"
    assert lines[1].endswith(" torch==2.13.0") and lines[2].endswith(f' --no-deps "git+${{REPO_URL}}@{shas[2]}"')
    assert lines[5].endswith(f' --no-deps "git+${{REPO_URL}}@{shas[3]}"')
    assert all(shlex.split(line) for line in lines)   # each a whole command, as a shell reads it

    # the same script with its bad side's line installing the last good commit: its venvs no longer differ, and
    # verification (which runs the printed lines, not bisector's own environments) says so
    tampered = tmp_path / "tampered.sh"
    tampered.write_text(text.replace(f"@{shas[3]}", f"@{shas[2]}"))
    db = Store(tmp_path / "s.db", read_only=True)
    run = db.list_runs()[-1]
    result = BisectResult.model_validate(run.result).model_copy(update={"repro": None})
    config = JobConfig.model_validate(run.config)
    again = verify(db, result, config, tampered, repro_script(result, config, tampered.name), env_cache)
    assert again.verified is False and (again.last_good.verdict.value, again.first_bad.verdict.value) == ("good", "good")


def test_an_install_line_that_fails_is_no_verification(tiny_index, tmp_path, env_cache, plain_spec):
    store = str(tmp_path / "s.db")
    ran = _cli("run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0", "--bad", "1.5", "--index-url",
               tiny_index, "--probe", str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200",
               "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store", store)
    assert ran.returncode == 0, ran.stderr[-3000:]
    script = tmp_path / "repro.py"
    assert _cli("report", "--repro", str(script), "--store", store, "--cache-dir", str(env_cache)).returncode == 0
    text = script.read_text()
    assert re.search(r"^# \$ good/bin/pip install --index-url \S+ --no-deps tinypkg==1\.3\.0$", text, re.M)
    db = Store(tmp_path / "s.db", read_only=True)
    run = db.list_runs()[-1]
    result = BisectResult.model_validate(run.result).model_copy(update={"repro": None})
    config = JobConfig.model_validate(run.config)
    broken = tmp_path / "broken.py"
    broken.write_text(text.replace("tinypkg==1.4.0", "tinypkg==9.9.9"))   # a pin the index does not have
    repro = verify(db, result, config, broken, repro_script(result, config, broken.name), env_cache)
    assert repro.verified is False and repro.first_bad.verdict.value == "skip"
    assert "install line 6 (bad/bin/pip install" in repro.first_bad.reason and "9.9.9" in repro.first_bad.reason
