"""The command line bisector writes for a job (a diff's follow-up bisect, a matrix's bisect of what moved,
an issue draft) reproduces that job: parsed by bisector's own parser and layered like any command line,
it gives the same job, probe, criterion and torch choice."""
from __future__ import annotations

from pathlib import Path

import pytest

from bisector.cli.main import _parse
from bisector.cli.overrides import run_job
from bisector.job.argv import run_argv
from bisector.job.config import JobConfig
from bisector.job.jobfile import load_config

JOBS = {
    "a built-in probe with its arguments": {
        "job": {"package": "accelerate", "good": "0.20.0", "bad": "0.22.0", "mode": "releases",
                "index_url": "http://127.0.0.1:1/simple", "pins": ["transformers==4.30.0"]},
        "probe": {"name": "ga_memory", "args": ["--loop=trainer", "--sizes", "64,96", "--precision=bf16"],
                  "timeout": 600},
        "criterion": {"metric": "ga_excess_bytes_per_param", "threshold": 0.5, "repeats": 2, "confirm": False}},
    "a script, commits, every after-the-boundary switch": {
        "job": {"package": "tinypkg", "good": "v1", "bad": "v2", "mode": "commits", "repo": "/src/tinypkg",
                "repo_url": "https://example.org/o/tinypkg", "first_parent": False, "find_fix": True,
                "attribute": False, "follow": False, "follow_repo": "/src/other", "confirm_revert": False},
        "probe": {"path": "probes/mine.py"},
        "criterion": {"metric": "peak", "max_increase": "5%", "noise": 0.02, "direction": "decrease"},
        "env": {"torch": "2.13.0"}},
    "an exit-code probe, widened": {
        "job": {"package": "transformers", "good": "4.36.0", "bad": "4.38.2", "widen": True, "pre": True},
        "probe": {"cmd": "python check.py --strict", "timeout": 90.5},
        "criterion": {"crash_is_bad": True, "timeout_is_bad": True}},
    "the built-in job's probe with its arguments replaced, stats": {
        "job": {"package": "accelerate", "good": "0.20.0", "bad": "0.22.0"},
        "probe": {"name": "ga_memory", "args": ["--loop=accelerate"]},
        "criterion": {"metric": "ga_excess_bytes_per_param", "compare": "stats", "min_effect": "10%",
                      "alpha": 0.01, "repeats": 5}},
    "the built-in job's probe with none of its arguments": {
        "job": {"package": "accelerate", "good": "0.20.0", "bad": "0.22.0"},
        "probe": {"name": "ga_memory", "timeout": 1800},
        "criterion": {"metric": "ga_excess_bytes_per_param", "threshold": 0.5}},
    "your program, unchanged": {
        "job": {"package": "transformers", "good": "4.36.0", "bad": "4.38.2", "clone": True, "follow": True},
        "probe": {"command": ["python", "train.py", "--lr", "1e-3", "--", "x y"], "measure_skip": 3,
                  "meter": "rss", "timeout": 120},
        "criterion": {"metric": "rss_peak_bytes", "max_increase": "10%", "oom_is_bad": False}},
}


def _sections(config: JobConfig) -> dict:
    data = config.model_dump(mode="json")
    return {key: data[key] for key in ("job", "probe", "criterion", "env")}


@pytest.mark.parametrize("name", JOBS)
def test_the_written_command_line_gives_the_same_job(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a program runs where the command is started: here, on both sides
    raw = JOBS[name]
    if "command" in raw["probe"]:
        raw = {**raw, "probe": {**raw["probe"], "cwd": str(tmp_path)}}
    config = JobConfig.model_validate(raw)
    words = run_argv(config)
    assert words[:2] == ["bisector", "run"] and all(isinstance(w, str) for w in words)
    args = _parse(words[1:])
    assert not isinstance(args, int), words
    again = run_job(None, args)
    assert _sections(again) == _sections(config), words


def test_a_users_program_ends_the_line_after_a_double_dash():
    config = JobConfig.model_validate({**JOBS["your program, unchanged"]})
    words = run_argv(config)
    assert words[words.index("--") + 1:] == ["python", "train.py", "--lr", "1e-3", "--", "x y"]
    assert "--probe" not in words and "--measure-skip" in words and Path(words[0]).name == "bisector"


def test_the_default_jobs_own_probe_arguments_are_not_written_twice():
    config = JobConfig.model_validate(JOBS["a built-in probe with its arguments"])
    words = run_argv(config)
    assert "--probe-arg=--loop=trainer" not in words and "--replace-probe-args" not in words
    replaced = run_argv(JobConfig.model_validate(JOBS["the built-in job's probe with its arguments replaced, stats"]))
    assert replaced[replaced.index("--replace-probe-args") + 1] == "--probe-arg=--loop=accelerate"


@pytest.mark.parametrize("toml", ["", '[probe]\nname = "ga_memory"\nargs = ["--sizes", "64,96"]\n',
                                  '[job]\npackage = "transformers"\ngood = "4.36.0"\nbad = "4.38.2"\n'
                                  '[probe]\nname = "step_time"\n[criterion]\nmetric = "step_seconds"\nmax_increase = "20%"\n'])
def test_a_job_from_a_job_file_is_reproduced_from_an_empty_directory(toml, tmp_path, monkeypatch):
    """The default job, and job files that replace its probe arguments or its probe: the written command,
    run where no bisect.toml is, gives the job the file gave."""
    (tmp_path / "bisect.toml").write_text(toml)
    config = load_config(tmp_path / "bisect.toml", {})
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    monkeypatch.chdir(empty)
    again = run_job(None, _parse(run_argv(config)[1:]))
    assert _sections(again) == _sections(config), run_argv(config)


def test_an_offered_command_keeps_the_users_program_after_its_own_flags():
    """The refine line of a run of your program: its flags before --, the program (and its own --json) untouched."""
    from bisector.job.commandline import portable_words, with_words

    ran = ["bisector", "run", "--package", "transformers", "--good", "4.36.0", "--store", "s.db", "--", "python",
           "train.py", "--json", "--good", "x"]
    refine = with_words(ran, {"--mode": "auto", "--good": "4.37.2", "--bad": "4.38.0"})
    assert refine == ["bisector", "run", "--package", "transformers", "--store", "s.db", "--mode", "auto", "--good",
                      "4.37.2", "--bad", "4.38.0", "--", "python", "train.py", "--json", "--good", "x"]
    assert portable_words(ran) == ["bisector", "run", "--package", "transformers", "--good", "4.36.0", "--",
                                   "python", "train.py", "--json", "--good", "x"]
