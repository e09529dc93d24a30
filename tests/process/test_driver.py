"""The driver end to end in milliseconds: a real loopback index, real git repositories, a real store,
and fake measurements behind the measuring seam (no environment, no probe). Release plan -> phases
(widen, confirm, find-fix, auto refinement to commits) -> the assembled result and the stored run."""
from __future__ import annotations

import shlex
import datetime as dt
import json
import os
from pathlib import Path

import pytest

from bisector.bisection.driver import Bisector
from bisector.bisection.wiring import bisector_for, preflight
from bisector.bisection.recorder import config_hash
from bisector.job.config import JobConfig
from bisector.core.measurement import Status
from bisector.core.result import made_by
from bisector.core.search import Outcome
from bisector.core.verdict import Verdict
from bisector.cli.run_kinds import log_text
from bisector.errors import UndecidedError, UsageError
from bisector.report.render import render_json
from bisector.store.storage import Store
from tests.support.fakes import Absent, FakeMeasurers
from tests.support.gitfixture import make_repo
from tests.support.pkgindex import LocalIndex, build_wheel

PROBE = Path(__file__).resolve().parent.parent / "probes" / "tiny_memory.py"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "1.6.0", "2.0.0rc1", "2.0.0"]
STEP = {v: (2.0 if v >= "1.4.0" else 1.0) for v in VERSIONS}     # 1.4.0 is the first bad release


def test_a_metric_the_probe_says_why_it_left_out_is_that_reason_not_a_typo(tmp_path, index_url, store):
    """The command meter leaves step_peak_bytes out of a program that stepped no optimizer, and says why:
    with --threshold (no endpoint calibration) the run still says the probe's reason, never 'not produced'."""
    why = Absent("the command stepped no optimizer (no optimizer.step() seen): whole-run metrics only")
    with pytest.raises(UndecidedError) as caught:
        bisect(job(tmp_path, index_url), store, FakeMeasurers({v: why for v in VERSIONS}))
    assert str(caught.value) == ("cannot measure either endpoint: metric m missing from the probe result: the command "
                                 "stepped no optimizer (no optimizer.step() seen): whole-run metrics only")


def test_measure_skip_beyond_the_steps_taken_stops_at_the_first_measurement(tmp_path, index_url, store):
    left_out = Absent("3 optimizer step(s) seen and --measure-skip 5 leaves none to measure", steps=3, skip=5)
    measurers = FakeMeasurers({v: left_out for v in VERSIONS})
    with pytest.raises(UsageError, match=r"^--measure-skip 5 leaves none of the 3 optimizer steps the command took "
                                         r"\(at 1.0.0\) to measure: give --measure-skip below 3$"):
        bisect(job(tmp_path, index_url, probe={"command": ["python", "train.py"]},
                   criterion={"metric": "step_peak_bytes"}), store, measurers)
    assert sum(m.probes_run for m in measurers.made) == 1 and store.get_run() is None


@pytest.fixture(scope="module")
def index_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("driver-index")
    idx = LocalIndex(root / "idx")
    for i, v in enumerate(VERSIONS):
        idx.add(build_wheel(root / "w", "tinypkg", v), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


class Collect:
    """A handler that keeps what the driver tells it."""

    def __init__(self):
        self.notes, self.plans, self.steps = [], [], []

    def note(self, text):
        self.notes.append(text)

    def plan(self, phase, candidates):
        self.plans.append((phase, [c.short for c in candidates]))

    def step(self, step):
        self.steps.append(step)


def job(tmp_path: Path, index_url: str, good="1.0", bad="1.6", mode="releases", probe=None, package="tinypkg",
        **sections) -> JobConfig:
    data = {"job": {"package": package, "good": good, "bad": bad, "mode": mode, "index_url": index_url,
                    **sections.pop("job", {})},
            "probe": probe or {"path": str(PROBE)},
            "criterion": {"metric": "m", "threshold": 1.5, **sections.pop("criterion", {})},
            "run": {"cache_dir": str(tmp_path / "cache")}, **sections}
    return JobConfig.model_validate(data)


def bisect(config: JobConfig, store: Store, measurers: FakeMeasurers, command=None):
    handler = Collect()
    result = Bisector(config, store, measurers, handler=handler, command=command).run()
    return result, handler


@pytest.fixture
def store(tmp_path):
    db = Store(tmp_path / "s.db")
    yield db
    db.close()


def test_releases_found_assembles_the_result_and_stores_the_run(tmp_path, index_url, store):
    result, seen = bisect(job(tmp_path, index_url), store, FakeMeasurers(STEP))
    assert result.status is Outcome.FOUND and result.exit_code == 0
    assert (result.first_bad.ref, result.last_good.ref, result.mode.value) == ("1.4.0", "1.3.0", "release")
    assert result.reason == "1.4.0 is the first bad candidate and 1.3.0 the last good one"
    assert result.criterion == "m > 1.5" and result.metric == "m"
    assert result.decision_rule.startswith("one measurement per candidate, BAD when it is beyond the threshold")
    assert "2.0.0rc1" not in seen.plans[0][1] and seen.plans[0] == ("releases", VERSIONS[:7])
    assert [s.verdict for s in result.steps[:2]] == [Verdict.GOOD, Verdict.BAD] and seen.steps == result.steps
    assert result.log == [s.log_line() for s in result.steps] and result.log[0].startswith("good releases 1.0.0")
    assert result.probes_run == len(result.steps) and result.measurements_reused == 0
    assert (result.good_end.ref, result.good_end.value, result.bad_end.ref) == ("1.0.0", 1.0, "1.6.0")
    assert result.threshold == 1.5 and result.bisector_version == made_by() != "unknown"
    assert result.first_bad.metrics == {"m": 2.0, "other": 7.0} and result.first_bad.details == {"peak_phase": "backward"}
    assert result.probe.schema_version == "fake/1" and result.probe.name == "fake"
    assert result.environment.env_spec == "fake" and result.environment.env_base == "current"
    report = json.loads(render_json(result))
    assert report["metric"] == "m" and report["explanation"] == [
        "other did not change.", "The peak moved from phase forward (last good) to phase backward (first bad)."]
    run = store.get_run(result.run_id)
    assert run.status == Outcome.FOUND and run.result["first_bad"]["ref"] == "1.4.0"
    rows = store.steps(result.run_id)
    assert [r.candidate for r in rows] == [f"releases {s.candidate}" for s in result.steps]


def test_an_identical_run_is_its_own_run_and_reuses_every_measurement(tmp_path, index_url, store):
    measurers = FakeMeasurers(STEP)
    first, _ = bisect(job(tmp_path, index_url), store, measurers)
    again, _ = bisect(job(tmp_path, index_url), store, measurers)
    assert again.run_id != first.run_id and again.probes_run == 0
    assert again.measurements_reused == first.probes_run and all(s.reused for s in again.steps)
    assert len(store.steps(again.run_id)) == len(store.steps(first.run_id)) == len(again.steps)   # both logs kept
    rows = [store.get_run(first.run_id), store.get_run(again.run_id)]
    assert rows[0].config_hash == rows[1].config_hash == config_hash(job(tmp_path, index_url))
    assert [r.id for r in store.runs_with_hash(rows[0].config_hash)] == [again.run_id, first.run_id]
    resumed = Bisector(job(tmp_path, index_url), store, measurers, run_id=first.run_id).run()   # --resume RUN
    assert resumed.run_id == first.run_id and len(store.list_runs()) == 2


def test_the_same_command_after_an_interrupt_continues_that_run_and_leaves_no_interrupted_row(tmp_path, index_url,
                                                                                               store):
    from bisector.cli.resumed import interrupted_run
    measurers = FakeMeasurers(STEP)
    config = job(tmp_path, index_url)
    first, _ = bisect(config, store, measurers)
    assert interrupted_run(store, config) is None                     # finished: a rerun is a run of its own
    store.put_run(store.get_run(first.run_id).model_copy(update={"status": "interrupted", "result": None}))
    assert interrupted_run(store, job(tmp_path, index_url, bad="1.5")) is None   # another job's run is not continued
    stopped = interrupted_run(store, config)
    assert stopped is not None and stopped.id == first.run_id
    again = Bisector(config, store, measurers, run_id=stopped.id).run()
    assert again.run_id == first.run_id and again.probes_run == 0
    assert [(r.id, r.status) for r in store.list_runs()] == [(first.run_id, Outcome.FOUND)]


def test_the_log_names_a_revert_step_by_the_reverted_tree_not_its_bad_end(tmp_path, index_url, store):
    from bisector.decide.judge import Judgement
    from bisector.bisection.recorder import RunRecorder
    from bisector.core.candidate import Candidate, CandidateKind
    from bisector.report.text import render_log
    rec = RunRecorder(job(tmp_path, index_url), store, "feedfacecafe", ["bisector", "run"])
    rec.begin()
    onto = Candidate(package="tinypkg", kind=CandidateKind.COMMIT, ref="9e72c61296" + "0" * 30)
    rec.step("commits", onto, Judgement(Verdict.BAD, "m=1.2 vs 0.5", 1.2))
    rec.step("revert", onto.model_copy(update={"revert": "145a98fc12" + "1" * 30}), Judgement(Verdict.GOOD, "m=0 vs 0.5", 0.0))
    log = render_log(store, store.get_run("feedfacecafe")).splitlines()
    assert log[-2].startswith(f"bad commits {onto.ref} value=1.2")
    assert log[-1].startswith(f"good revert {onto.ref}-revert-145a98fc12{'1' * 30} value=0")


def test_identical_runs_started_at_once_are_two_runs(tmp_path, index_url, store):
    """Two processes' worth of the same job at the same moment (threads over one store here): two runs."""
    import threading

    results = []
    threads = [threading.Thread(target=lambda: results.append(bisect(job(tmp_path, index_url), store,
                                                                      FakeMeasurers(STEP))[0])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.run_id for r in results}) == 2 and len(store.list_runs()) == 2
    assert all(r.first_bad.ref == results[0].first_bad.ref for r in results)
    for r in results:   # each run keeps its own steps, in order, and its own log: nothing of the other's
        stored = store.steps(r.run_id)
        assert [s.seq for s in stored] == list(range(len(r.steps))) and len(stored) >= 3
        assert [s.candidate for s in stored] == [f"{s.phase} {s.candidate}" for s in r.steps]
        assert all(s.run_id == r.run_id for s in stored)
        log = log_text(store, store.get_run(r.run_id)).splitlines()
        assert log[0].startswith(f"# bisector run {r.run_id}:")
        assert [line.split(" (")[0] for line in log[3:3 + len(stored)]] == [
            f"{s.verdict} {s.candidate} value={s.value:.6g}" for s in stored]


def test_a_run_stopped_undecided_is_stored_with_what_is_known_and_reports(tmp_path, index_url, store, capsys):
    """Both endpoints unmeasurable: the run stops after them (UndecidedError, exit 3) and is stored final, with its
    steps and the reason, so `bisector report` renders it (text, markdown, JSON) instead of "has not finished"."""
    from bisector.cli.main import main
    table = {v: Status.CRASHED for v in VERSIONS}
    measurers = FakeMeasurers(table)
    with pytest.raises(UndecidedError, match="cannot measure either endpoint") as stopped:
        bisect(job(tmp_path, index_url), store, measurers)
    assert stopped.value.exit_code == 3
    [run] = store.list_runs()
    assert run.status == "undecided" and run.result["status"] == "undecided"
    assert run.result["reason"].startswith("cannot measure either endpoint")
    assert [f"{s['phase']} {s['candidate']}" for s in run.result["steps"]] == [s.candidate for s in store.steps(run.id)]
    assert len(run.result["steps"]) == 2   # the two endpoints, nothing after them
    for fmt, said in (("text", "Undecided"), ("markdown", "cannot measure either endpoint"), ("json", '"undecided"')):
        assert main(["report", run.id, "--store", str(store.path), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert said in out and "cannot measure either endpoint" in out, out


def test_auto_mode_without_a_repository_says_how_to_refine(tmp_path, index_url, store):
    command = ["bisector", "run", "--package", "tinypkg", "--good", "1.0", "--bad", "1.6"]
    result, seen = bisect(job(tmp_path, index_url, mode="auto"), store, FakeMeasurers(STEP), command)
    assert result.refine_command == [*command[:4], "--mode", "auto", "--good", "1.3.0", "--bad", "1.4.0", "--repo",
                                     "<REPO>"]   # words, never a string to split again
    assert seen.notes[-1].startswith("no --repo given: the answer stops at releases; refine with:")
    assert result.notes == seen.notes


def test_the_refine_command_names_the_repository_the_metadata_names_so_it_runs_as_printed(tmp_path, index_url,
                                                                                         store, monkeypatch):
    from bisector.bisection import refine
    monkeypatch.setattr(refine, "metadata_url", lambda res, i: "https://example.org/tinypkg.git")
    command = ["bisector", "run", "--package", "tinypkg", "--good", "1.0", "--bad", "1.6"]
    result, seen = bisect(job(tmp_path, index_url, mode="auto"), store, FakeMeasurers(STEP), command)
    assert shlex.join(result.refine_command) == ("bisector run --package tinypkg --mode auto --good 1.3.0 --bad 1.4.0 "
                                                 "--repo https://example.org/tinypkg.git")
    assert "<REPO>" not in seen.notes[-1] and "the command below clones it" in seen.notes[-1]


def test_predates_range_offers_the_widen_command(tmp_path, index_url, store):
    command = ["bisector", "run", "--good", "1.4", "--bad", "1.6"]
    result, _ = bisect(job(tmp_path, index_url, good="1.4"), store, FakeMeasurers(STEP), command)
    assert result.status is Outcome.PREDATES_RANGE and result.exit_code == 3
    assert result.widen_command == ["bisector", "run", "--good", "1.4", "--bad", "1.6", "--widen"]
    assert result.reason.endswith("the good endpoint 1.4.0 already measured bad; try an older good, e.g.: "
                                  "bisector run --good 1.4 --bad 1.6 --widen")
    assert store.get_run(result.run_id).status == Outcome.PREDATES_RANGE


def test_widen_walks_back_then_bisects_the_wider_range(tmp_path, index_url, store):
    config = job(tmp_path, index_url, good="1.5", job={"widen": True})
    result, seen = bisect(config, store, FakeMeasurers(STEP))
    assert result.status is Outcome.FOUND and result.first_bad.ref == "1.4.0" and result.last_good.ref == "1.3.0"
    assert [s.candidate for s in result.steps if s.phase == "widen"] == ["1.4.0", "1.3.0"]
    assert "widened: 1.3.0 is GOOD; bisecting 1.3.0..1.5" in result.notes
    assert [phase for phase, _ in seen.plans] == ["releases", "releases"]
    assert seen.plans[1][1] == ["1.3.0", "1.4.0", "1.5.0"]
    assert (result.good_end.ref, result.bad_end.ref) == ("1.3.0", "1.5.0")   # the widened range's ends


def test_widen_that_finds_no_good_release_says_where_it_stopped_and_offers_no_widen(tmp_path, index_url, store):
    table = {**STEP, "1.0.0": Status.ENV_FAILED, "1.1.0": Status.ENV_FAILED, "1.2.0": 2.0, "1.3.0": 2.0}
    config = job(tmp_path, index_url, good="1.4", job={"widen": True})
    result, _ = bisect(config, store, FakeMeasurers(table))
    assert result.status is Outcome.PREDATES_RANGE and result.widen_command is None
    assert result.reason.endswith("already measured bad; the oldest release measured, 1.2.0, is BAD; compatibility "
                                  "ends around 1.0.0, where releases cannot be measured here (1.0.0: env-failed: "
                                  "env-failed in the fake probe): no older GOOD release found")


def test_contrast_is_measured_at_the_ends_and_the_reference_kept_for_its_package(tmp_path, index_url, store):
    contrast = {v: 0.0 for v in VERSIONS}
    config = job(tmp_path, index_url, contrast={"label": "the other loop", "args": ["--loop=other"]},
                 reference={"title": "seed", "package": "TinyPkg", "version": "1.4.0", "setting": "s",
                            "values": {"m": 2.5}})
    result, _ = bisect(config, store, FakeMeasurers(STEP, contrast=contrast))
    assert result.first_bad.ref == "1.4.0" and result.contrast.label == "the other loop"
    assert [(p.ref, p.value) for p in result.contrast.points] == [("1.0.0", 0.0), ("1.6.0", 0.0)]
    assert [s.candidate for s in result.steps if s.phase == "contrast"] == ["1.0.0", "1.6.0"]
    assert result.probes_run == len(result.steps) and result.log[-1].startswith("good contrast 1.6.0")
    assert result.reference["values"] == {"m": 2.5}
    own = job(tmp_path, index_url, probe={"path": str(PROBE), "args": ["--loop=trainer", "--loop=other"]},
              contrast={"label": "the other loop", "args": ["--loop=other"]})
    assert bisect(own, store, FakeMeasurers(STEP, contrast=contrast))[0].contrast is None  # the job's own setting
    other = job(tmp_path, index_url, reference={"title": "x", "package": "accelerate", "version": "1",
                                                "setting": "s"})
    assert bisect(other, store, FakeMeasurers(STEP))[0].reference is None  # about another package


def test_no_regression_and_skips_that_hide_the_boundary(tmp_path, index_url, store):
    flat, _ = bisect(job(tmp_path, index_url, bad="1.3"), store, FakeMeasurers(STEP))
    assert flat.status is Outcome.NO_REGRESSION and flat.exit_code == 0 and flat.first_bad is None
    hidden = {**STEP, "1.4.0": Status.CRASHED}
    result, _ = bisect(job(tmp_path, index_url, bad="1.5"), store, FakeMeasurers(hidden))
    assert result.status is Outcome.UNDECIDED and result.ambiguous == ["1.4.0", "1.5.0"]
    skipped = next(s for s in result.steps if s.candidate == "1.4.0")
    assert skipped.verdict is Verdict.SKIP and skipped.reason == "crashed: crashed in the fake probe"


def test_a_boundary_that_does_not_hold_on_confirmation_is_undecided(tmp_path, index_url, store):
    flaky = {**STEP, "1.4.0": [2.0, 2.0, 2.0, 2.0, 2.0, 1.0]}    # reads good at the confirmation repeat
    config = job(tmp_path, index_url, criterion={"confirm": True})
    result, _ = bisect(config, store, FakeMeasurers(flaky))
    assert result.status is Outcome.UNDECIDED and result.exit_code == 3
    assert result.reason.startswith("re-measuring the boundary pair gave different verdicts: 1.4.0 is the first bad")
    assert [s.phase for s in result.steps][-2:] == ["releases:confirm"] * 2
    steady, _ = bisect(config, store, FakeMeasurers(STEP))
    assert steady.status is Outcome.FOUND


def test_find_fix_names_the_first_fixed_release(tmp_path, index_url, store):
    fixed = {v: (1.0 if v >= "1.4.0" else 2.0) for v in VERSIONS}
    result, _ = bisect(job(tmp_path, index_url, good="1.6", bad="1.0", job={"find_fix": True}), store,
                       FakeMeasurers(fixed))
    assert result.status is Outcome.FOUND and result.find_fix and result.first_bad.ref == "1.4.0"
    assert (result.good_end.ref, result.bad_end.ref) == ("1.6.0", "1.0.0")   # fixed at the newer end
    assert json.loads(render_json(result))["headline"].startswith("First fixed: tinypkg 1.4.0")


def test_exit_code_probes_have_no_metric(tmp_path, index_url, store):
    codes = {v: (1 if v >= "1.4.0" else 0) for v in VERSIONS}
    config = job(tmp_path, index_url, probe={"cmd": "sh repro.sh"}, criterion={"metric": None, "threshold": None})
    result, _ = bisect(config, store, FakeMeasurers(codes, exit_code_mode=True))
    assert result.first_bad.ref == "1.4.0" and result.metric is None and result.first_bad.value is None
    assert result.criterion == "probe exit code (0 good, 125 skip, 1-127 bad)"
    assert result.decision_rule.startswith("probe exit code: 0 GOOD, 125 SKIP")
    assert "metric" not in json.loads(render_json(result))   # as results were before the field existed


def test_the_gpus_a_run_checks_its_probe_for_are_found_once_and_measured_on(tmp_path, index_url, store, monkeypatch):
    """The preflight finds this machine's GPUs (an nvidia-smi on PATH that logs each call) and checks the probe
    for them; the run's engine measures on those: the driver's tool is asked once per command, not twice."""
    bin_dir, log = tmp_path / "bin", tmp_path / "smi.log"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "$1" >> {log}\nif [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H200 (UUID: GPU-1111)"; '
        'else echo "GPU-1111, 143771, 570.86.15"; fi\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = job(tmp_path, index_url)
    resolved = preflight(config)
    measuring = bisector_for(config, store, resolved=resolved)
    assert [g.id for g in resolved.gpus] == ["GPU-1111"] and measuring.measurers.slots == 1
    assert measuring.measurers.executor.kind == "cuda:NVIDIA H200, 143771 MiB, driver 570.86.15"
    assert log.read_text().split() == ["-L", "--query-gpu=uuid,memory.total,driver_version"]


def test_usage_errors_before_any_measurement(tmp_path, index_url, store):
    measurers = FakeMeasurers(STEP)
    with pytest.raises(UsageError, match="--mode commits needs --repo"):
        bisect(job(tmp_path, index_url, mode="commits"), store, measurers)
    with pytest.raises(UsageError, match="torch is bisected by release"):
        bisect(job(tmp_path, index_url, mode="commits", package="torch"), store, measurers)
    with pytest.raises(UsageError, match="version 9.9 does not exist"):
        bisect(job(tmp_path, index_url, bad="9.9"), store, measurers)
    assert measurers.made == [] and store.get_run() is None  # rejected input is no run to list or resume


def test_a_metric_the_probe_does_not_produce_stops_after_the_first_measurement(tmp_path, index_url, store):
    measurers = FakeMeasurers(STEP)
    with pytest.raises(UsageError, match=r"metric 'x' is not produced by the probe; it produces: m, other$"):
        bisect(job(tmp_path, index_url, criterion={"metric": "x"}), store, measurers)
    assert sum(m.probes_run for m in measurers.made) == 1 and store.get_run() is None


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("driver-repo"), commits=8, bad_at=5, tags={3: "v1.3.0", 6: "v1.4.0"})


def test_commits_of_a_repository_with_links(tmp_path, index_url, store, repo):
    path, shas = repo
    table = {sha: (2.0 if i >= 5 else 1.0) for i, sha in enumerate(shas)}
    config = job(tmp_path, index_url, good=shas[0], bad=shas[-1], mode="commits",
                 job={"repo": str(path), "repo_url": "https://example.org/tiny"})
    result, seen = bisect(config, store, FakeMeasurers(table))
    assert result.status is Outcome.FOUND and result.mode.value == "commit"
    assert result.first_bad.sha == shas[5] and result.first_bad.pr == 105 and result.last_good.sha == shas[4]
    assert result.first_bad.link == f"https://example.org/tiny/commit/{shas[5]}"
    assert result.compare_link == f"https://example.org/tiny/compare/{shas[4]}...{shas[5]}"
    assert result.reason == f"{shas[5][:10]} is the first bad candidate and {shas[4][:10]} the last good one"
    assert seen.plans == [("commits", [s[:10] for s in shas])]


def test_auto_mode_refines_between_the_boundary_release_tags(tmp_path, index_url, store, repo):
    path, shas = repo
    table = {**STEP, **{sha: (2.0 if i >= 5 else 1.0) for i, sha in enumerate(shas)}}
    config = job(tmp_path, index_url, mode="auto", job={"repo": str(path)})
    result, seen = bisect(config, store, FakeMeasurers(table))
    assert result.mode.value == "commit" and result.first_bad.sha == shas[5] and result.last_good.sha == shas[4]
    assert [phase for phase, _ in seen.plans] == ["releases", "commits"]
    assert seen.plans[1][1] == [s[:10] for s in shas[3:7]]     # v1.3.0 .. v1.4.0
    assert {s.phase for s in result.steps} == {"releases", "commits"}
    assert (result.good_end.ref, result.bad_end.ref) == ("1.0.0", "1.6.0")   # the range the user gave


def test_a_release_answer_links_the_compare_view_of_its_tags(tmp_path, index_url, store):
    path, _ = make_repo(tmp_path, commits=2, bad_at=None, tags={0: "1.3.0", 1: "1.4"})
    url = "https://example.org/tiny"
    result, _ = bisect(job(tmp_path, index_url, job={"repo_url": url}), store, FakeMeasurers(STEP))
    assert result.repo_url == url and result.compare_link == f"{url}/compare/v1.3.0...v1.4.0"  # the stack's tags
    tagged, _ = bisect(job(tmp_path, index_url, job={"repo_url": url + "/", "repo": str(path)}), store,
                       FakeMeasurers(STEP))
    assert tagged.compare_link == f"{url}/compare/1.3.0...1.4"   # looked up in the repository's tags
    assert bisect(job(tmp_path, index_url), store, FakeMeasurers(STEP))[0].compare_link is None   # no URL known


def test_each_job_reports_only_its_own_context(tmp_path, index_url, store):
    """A job with a [reference] and a [contrast] tells them; the same file bisected with an exit-code probe or a
    stats-mode speed probe tells neither (the report's paragraphs belong to the job that ran)."""
    from bisector.cli.overrides import run_overrides
    from bisector.cli.subcommands import build_parser
    from bisector.job.jobfile import load_config
    from bisector.report.render import render_markdown

    path = tmp_path / "bisect.toml"
    path.write_text(f'[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "1.6"\nmode = "releases"\nindex_url = "{index_url}"\n'
                    f'[probe]\npath = "{PROBE}"\nargs = ["--loop=a"]\n[criterion]\nmetric = "m"\nthreshold = 1.5\n'
                    '[contrast]\nlabel = "the other loop"\nargs = ["--loop=b"]\n'
                    '[reference]\ntitle = "Upstream says"\npackage = "tinypkg"\nversion = "1.4.0"\nsetting = "s"\n'
                    'values = { m = 2.5 }\n')

    def report(*flags, **fake) -> str:
        config = load_config(path, run_overrides(build_parser().parse_args(["run", *flags])))
        table = {v: (int(STEP[v] > 1.5) if fake else STEP[v]) for v in VERSIONS}
        result, _ = bisect(config, store, FakeMeasurers(table, contrast={v: 0.0 for v in VERSIONS}, **fake))
        return render_markdown(result)

    own = report()
    assert "Upstream says" in own and "the other loop" in own
    for other in (report("--probe-cmd", "sh repro.sh", exit_code_mode=True),
                  report("--probe", "step_time", "--metric", "m", "--compare", "stats")):
        assert "Upstream says" not in other and "the other loop" not in other and "Context:" not in other


def _program_job(tmp_path: Path, index_url: str, **criterion) -> JobConfig:
    """A user's program (``-- python train.py``) with the rule given here (none: bisector chooses)."""
    return JobConfig.model_validate({
        "job": {"package": "tinypkg", "good": "1.0", "bad": "1.6", "mode": "releases", "index_url": index_url},
        "probe": {"command": ["python", "train.py"], "cwd": str(tmp_path)}, "criterion": criterion,
        "run": {"cache_dir": str(tmp_path / "cache")}})


def test_a_program_run_without_a_rule_answers_with_its_memory_rule_and_says_which(tmp_path, index_url, store):
    peaks = {v: (120.0 if v >= "1.4.0" else 100.0) for v in VERSIONS}
    result, seen = bisect(_program_job(tmp_path, index_url), store, FakeMeasurers(peaks, metric="step_peak_bytes"))
    assert result.status is Outcome.FOUND and result.first_bad.ref == "1.4.0"
    assert result.criterion == "step_peak_bytes > 110 B" and result.notes[0].startswith(
        "no rule given: step_peak_bytes (memory) is BAD when it rises more than 10% above the good end's")
    assert seen.notes[0] == result.notes[0]


def test_a_bad_end_that_crashes_without_a_rule_bisects_where_the_program_starts_to_fail(tmp_path, index_url, store):
    runs = {v: (Status.CRASHED if v >= "1.4.0" else 100.0) for v in VERSIONS}
    result, _ = bisect(_program_job(tmp_path, index_url), store, FakeMeasurers(runs, metric="step_peak_bytes"))
    assert result.status is Outcome.FOUND and (result.last_good.ref, result.first_bad.ref) == ("1.3.0", "1.4.0")
    assert result.metric is None and result.criterion.startswith("the probe fails: a non-zero exit")
    said = [n for n in result.notes if n.startswith("the bad end 1.6.0 fails")]
    assert said == ["the bad end 1.6.0 fails (crashed: crashed in the fake probe) and no rule was given: bisecting "
                    "where the program starts to fail (the probe fails: a non-zero exit, a signal or out of memory is "
                    "BAD, a run that succeeds GOOD)"]
    step = next(s for s in result.steps if s.candidate == "1.4.0")
    assert step.verdict is Verdict.BAD and step.reason == "crashed: crashed in the fake probe"


@pytest.mark.parametrize("find_fix", [False, True])
def test_crash_is_bad_without_a_rule_finds_the_first_failing_or_the_fixing_release(tmp_path, index_url, store,
                                                                                     find_fix):
    broken = (lambda v: v < "1.4.0") if find_fix else (lambda v: v >= "1.4.0")
    runs = {v: (Status.CRASHED if broken(v) else 100.0) for v in VERSIONS}
    config = _program_job(tmp_path, index_url, crash_is_bad=True)
    ends = {"good": "1.6", "bad": "1.0"} if find_fix else {}
    config = config.model_copy(update={"job": config.job.model_copy(update={"find_fix": find_fix, **ends})})
    result, _ = bisect(config, store, FakeMeasurers(runs, metric="step_peak_bytes"))
    assert result.status is Outcome.FOUND and result.first_bad.ref == "1.4.0" and result.metric is None
    assert not any(n.startswith("no rule given") for n in result.notes)
