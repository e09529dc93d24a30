"""A real bisect over a real git repository whose commit subjects and author hold terminal escapes and
bidi controls: ``run``, ``report`` (text, markdown, JSON), ``log`` and ``report --repro`` print none of
them raw (JSON keeps the same data); ``--repro`` through a symlink, at a directory or in a missing one
is one line and exit 2 with nothing written; the repro's printed pip line installs as printed."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.cli.main import main
from tests.support.gitfixture import git, write_package

ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]")
SUBJECTS = ["Good start", "Middle \x1b]0;pwned\x07 \x1b[2J fake\u202eevil", "Bad \u2066end\u2069 \x9b31m \x1b[1A\x08over"]
AUTHOR = "Eve \x1b[31mRed\u202e"
PROBE = "python -c 'import sys, tinypkg; sys.exit(tinypkg.step() > 200000)'"
BATTERY = ["text: commit subjects and an author with escapes and bidi controls through run, report (3 formats), log",
           "writes: --repro through a symlink", "writes: --repro at a directory", "writes: --repro in a missing directory",
           "repro: the header's pip line installs as printed"]   # counted by tests/process/test_hostile.py


def _bisector(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BISECTOR_")}
    return subprocess.run([sys.executable, "-m", "bisector", *args], cwd=cwd, capture_output=True, timeout=120,
                          env=env)


def _in_process(capsysbinary, monkeypatch, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``bisector ARGS`` run by ``main`` in this process (what a subprocess would print, in a tenth of the time)."""
    monkeypatch.chdir(cwd)
    code = main(list(args))
    out, err = capsysbinary.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def _clean(raw: bytes) -> str:
    text = raw.decode("utf-8")
    assert not ACTING.search(text), ACTING.findall(text)
    return text


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """(directory, repository, run id, what ``run`` printed): three commits, the step at the last."""
    root = tmp_path_factory.mktemp("hostile_text")
    repo = root / "tinypkg"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i, subject in enumerate(SUBJECTS):
        write_package(repo, "tinypkg", f"0.1.{i}", 400 if i == 2 else 100)
        date = f"2024-01-0{i + 1}T10:00:00+00:00"
        env = {**os.environ, "GIT_AUTHOR_NAME": AUTHOR, "GIT_AUTHOR_EMAIL": "eve@example.invalid",
               "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.invalid", "GIT_AUTHOR_DATE": date,
               "GIT_COMMITTER_DATE": date}
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", subject], cwd=repo, check=True, env=env)
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    (root / "plain.toml").write_text('name = "plain"\nbase = "current"\n')
    ran = _bisector("run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
                    "--bad", shas[2], "--env", str(root / "plain.toml"), "--probe-cmd", PROBE, "--store", "s.db",
                    "--cache-dir", "cache", "--no-prefetch", cwd=root)
    assert ran.returncode == 0, ran.stderr.decode(errors="replace")[-2000:]
    run_id = re.search(r"^run: (\w+)", ran.stdout.decode(), re.M)[1]
    return root, repo, run_id, ran


def test_run_report_and_log_show_subjects_and_authors_without_acting(hostile_run, capsysbinary, monkeypatch):
    root, _, run_id, ran = hostile_run
    printed = _clean(ran.stdout)
    _clean(ran.stderr)
    assert "'Bad \\u2066end\\u2069 \\x9b31m \\x1b[1A\\x08over'" in printed and "author: Eve \\x1b[31mRed\\u202e" in printed
    for fmt, said in (("text", "\\x1b]0;pwned\\x07"), ("markdown", "\\x1b\\]0;pwned\\x07")):
        shown = _in_process(capsysbinary, monkeypatch, "report", run_id, "--store", "s.db", "--format", fmt, cwd=root)
        assert shown.returncode == 0 and said in _clean(shown.stdout)
    report = _in_process(capsysbinary, monkeypatch, "report", run_id, "--store", "s.db", "--format", "json", cwd=root)
    data = json.loads(_clean(report.stdout))
    assert data["first_bad"]["subject"] == SUBJECTS[2] and data["first_bad"]["author"] == AUTHOR   # the same data
    log = _in_process(capsysbinary, monkeypatch, "log", run_id, "--store", "s.db", cwd=root)
    assert log.returncode == 0 and "'Bad \\u2066end\\u2069" in _clean(log.stdout)
    written = (root / "reports" / f"{run_id}.md").read_text()
    assert not ACTING.search(written) and "Middle \\x1b\\]0;pwned" in written


def test_repro_is_never_written_through_a_link_or_at_a_directory(hostile_run, capsysbinary, monkeypatch):
    root, _, run_id, _ = hostile_run
    victim = root / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o600)
    (root / "link.sh").symlink_to(victim)
    (root / "adir").mkdir()
    for target, said in (("link.sh", "is a symlink"), ("adir", "is a directory"), ("no/r.sh", "no directory")):
        refused = _in_process(capsysbinary, monkeypatch, "report", run_id, "--store", "s.db", "--repro", target, cwd=root)
        err = refused.stderr.decode()
        assert (refused.returncode, err.count("\n")) == (2, 1) and said in err and not refused.stdout, err
    assert victim.read_text() == "keep\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert (root / "link.sh").is_symlink() and not list((root / "adir").iterdir()) and not (root / "no").exists()


def test_the_repro_header_installs_as_printed(hostile_run):
    """The script as ``report --repro`` writes it (made here without its verification, which builds fresh
    environments: tests/slow/test_repro_fresh_venvs.py)."""
    from bisector.repro.compose import repro_script
    from bisector.core.result import BisectResult
    from bisector.job.config import JobConfig
    from bisector.store.storage import Store
    root, repo, run_id, _ = hostile_run
    run = Store(root / "s.db", read_only=True).get_run(run_id)
    script = repro_script(BisectResult.model_validate(run.result), JobConfig.model_validate(run.config), "r.sh").text
    assert not ACTING.search(script) and str(repo) not in script and sys.executable not in script
    assert str(root) not in script   # (the bisect's --env spec is <PATH>)
    line = next(h for h in script.splitlines() if h.startswith("# $ good/bin/pip install ") and "REPO_URL" in h
                ).removeprefix("# $ good/bin/pip install ")
    assert "from==" not in line and "REPO_URL" in line
    # the printed requirements, word for word, to bisector's own pip (its torch satisfies the pin; offline)
    installed = subprocess.run(f"{sys.executable} -m pip install --dry-run --no-index --no-deps -q {line}", shell=True,
                               cwd=root, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "REPO_URL": repo.as_uri()})
    assert installed.returncode == 0, installed.stderr[-2000:]
