"""The ray executor on one real local Ray with two logical GPUs (``ray.init(num_cpus=2, num_gpus=2)``,
one instance for the module): one probe per GPU, speculation on a spare GPU, Ctrl-C, and a node
whose environment is not the run's."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import Measurement, Status
from bisector.envs import EnvManager, InstallTarget, load_env_spec
from bisector.measure.measurer import Measurer
from bisector.job.probe import ProbeBase, ScriptProbe
from bisector.store.storage import Store
from tests.support.gitfixture import make_repo
from tests.support.raytools import HOLD, alive, commit_args, events, loopback, wait_for

ray = pytest.importorskip("ray")
from bisector.measure import ray_executor  # noqa: E402 - needs Ray
from bisector.measure.ray_task import TaskPayload, TaskResult, probe_files, take_on_node  # noqa: E402
from bisector.measure.take import Proved, TakeJob  # noqa: E402



@pytest.fixture(scope="module")
def ray_local():
    loopback()
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def repo12(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("repo"), commits=12, bad_at=7)


def _commit(shas: list[str], i: int) -> Candidate:
    return Candidate(package="tinypkg", kind=CandidateKind.COMMIT, ref=shas[i])


def _measurer(tmp_path: Path, env_cache: Path, plain_spec: Path, repo: Path, probe: ProbeBase) -> Measurer:
    envs = EnvManager(env_cache)
    return Measurer(Store(tmp_path / "s.db"), envs, load_env_spec(str(plain_spec), Path(".")), probe,
                    ray_executor.RayExecutor(cache_dir=str(env_cache)), repo_path=repo, run_id="t")


def test_two_probes_at_once_on_disjoint_gpus_and_a_third_waits(ray_local, repo12, tmp_path, env_cache, plain_spec):
    """Three measurements submitted at once; the probes wait for GO, which is given once two run: the
    two hold disjoint GPUs, the third has not started (no GPU is free) and starts after one ended."""
    repo, shas = repo12
    log, go = tmp_path / "log.jsonl", tmp_path / "go"
    probe = ScriptProbe(path=HOLD, args=[str(log), str(go), "0.5"])
    measurer = _measurer(tmp_path, env_cache, plain_spec, repo, probe)
    assert (measurer.executor.device, measurer.executor.kind, measurer.executor.slots) == ("cuda", "cuda:cuda", 2)
    results: list = []
    threads = [threading.Thread(target=lambda i=i: results.append(measurer.measure(_commit(shas, i))))
               for i in (0, 5, 11)]
    for t in threads:
        t.start()
    two = wait_for(lambda: [e for e in events(log) if e["event"] == "start"][1:] and events(log), what="two probes")
    waiting = [e for e in events(log) if e["event"] == "start"]
    go.touch()
    for t in threads:
        t.join(timeout=300)
    assert len(two) == 2 and len(waiting) == 2 and {e["gpu"] for e in two} == {"0", "1"}
    assert sorted(m.status for m in results) == [Status.OK] * 3
    runs = {e["candidate"]: e for e in events(log) if e["event"] == "end"}
    [third] = [e for c, e in runs.items() if c not in {x["candidate"] for x in two}]
    assert third["start"] >= min(runs[x["candidate"]]["end"] for x in two)  # it waited for a GPU
    assert {m.details["gpus"][0] for m in results} == {"0", "1"} and measurer.probes_run == 3


def test_spare_gpu_speculates_and_the_answer_is_the_local_one(ray_local, repo12, tmp_path, env_cache, plain_spec,
                                                              monkeypatch):
    """--jobs 1 on two GPUs: the spare one measures the likely next midpoint. Same answer and steps as
    local; every measurement Ray took is stored under the key a local run uses (which reuses them all)."""
    repo, shas = repo12
    log, go = tmp_path / "log.jsonl", tmp_path / "go"
    probe = ["--probe", str(HOLD), "--probe-arg", str(log), "--probe-arg", str(go), "--probe-arg", "0"]
    ray_store, local_store = tmp_path / "ray.db", tmp_path / "local.db"
    together: list = []

    def release_when_two_run():  # the probes wait for GO: only speculation can start a second one
        together.extend(wait_for(lambda: [e for e in events(log) if e["event"] == "start"][1:] and events(log),
                                 what="two probes at once"))
        go.touch()

    helper = threading.Thread(target=release_when_two_run, daemon=True)
    helper.start()
    assert main(commit_args(repo, shas, ray_store, env_cache, plain_spec, *probe, "--executor", "ray")) == 0
    helper.join(timeout=10)
    assert {e["candidate"] for e in together} == {shas[0], shas[-1]}  # the bad endpoint ran ahead, on the spare GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the local run on the same two (logical) GPUs
    assert main(commit_args(repo, shas, local_store, env_cache, plain_spec, *probe)) == 0
    on_ray, here = Store(ray_store), Store(local_store)
    runs = [s.get_run() for s in (on_ray, here)]
    assert [r.result["first_bad"]["sha"] for r in runs] == [shas[7], shas[7]]
    steps = [[(x["candidate"], x["verdict"], x["value"]) for x in r.result["steps"]] for r in runs]
    assert steps[0] == steps[1]
    ray_rows = {m.key: m for m in on_ray.measurements_for("tinypkg")}
    local_rows = {m.key: m for m in here.measurements_for("tinypkg")}
    assert set(local_rows) <= set(ray_rows)  # plus what the spare GPU measured ahead
    assert all(ray_rows[k].metrics == m.metrics and m.status is Status.OK for k, m in local_rows.items())
    assert all(m.status is Status.OK for m in ray_rows.values())
    assert runs[0].result["probes_run"] >= runs[1].result["probes_run"]
    again = tmp_path / "again.db"
    for m in ray_rows.values():  # what Ray measured, read back by a local run: nothing is probed again
        Store(again).put_measurement(m)
    assert main(commit_args(repo, shas, again, env_cache, plain_spec, *probe)) == 0
    assert Store(again).get_run().result["probes_run"] == 0


def test_ctrl_c_cancels_the_running_task_and_the_store_resumes(ray_local, repo12, tmp_path, env_cache, plain_spec):
    repo, shas = repo12
    log, go = tmp_path / "log.jsonl", tmp_path / "go"
    args = commit_args(repo, shas, tmp_path / "s.db", env_cache, plain_spec, "--probe", str(HOLD), "--probe-arg",
                       str(log), "--probe-arg", str(go), "--probe-arg", "0", "--executor", "ray",
                       "--ray-address", ray_local)
    run = subprocess.Popen([sys.executable, "-m", "bisector", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        started = wait_for(lambda: [e for e in events(log) if e["event"] == "start"], what="a probe to start")
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill() if run.poll() is None else None
    assert run.returncode == 130 and "interrupted" in err, err
    wait_for(lambda: not any(alive(e["pid"]) for e in started), timeout=30, what="the probes to stop")
    wait_for(lambda: ray.available_resources().get("GPU") == 2, timeout=30, what="the GPUs to be free")
    store = Store(tmp_path / "s.db")
    assert all(m.status is Status.OK for m in store.measurements_for("tinypkg"))  # nothing half-done
    go.touch()
    assert main(args[:-2]) == 0  # the same job (a local Ray this time) resumes from the store
    assert store.get_run().result["first_bad"]["sha"] == shas[7]


def test_a_node_with_another_environment_refuses_and_a_wrong_one_is_a_skip(ray_local, repo12, tmp_path, env_cache,
                                                                          plain_spec):
    """The node recomputes the recipe over its own base: a fingerprint that is not the run's is an
    ENV_FAILED SKIP (nothing built); a result whose proved revision is not the candidate's is one too."""
    repo, shas = repo12
    envs = EnvManager(env_cache)
    target = InstallTarget(package="tinypkg", source=repo, revision=shas[3])
    recipe = envs.recipe(load_env_spec(str(plain_spec), Path(".")), target)
    probe = ScriptProbe(path=HOLD, args=[str(tmp_path / "log"), "-", "0"])
    base = Measurement(key="k", package="tinypkg", candidate=shas[3], env_fingerprint=recipe.fingerprint,
                       probe_fingerprint=probe.fingerprint(), status=Status.RUNNING, seconds=0.0)
    other = recipe.model_copy(update={"fingerprint": "0" * 16})
    payload = TaskPayload(job=TakeJob(base=base, recipe=other, probe=probe), cache_dir=str(env_cache))
    out = TaskResult.model_validate_json(take_on_node(payload.model_dump_json(), probe_files(probe).model_dump_json(),
                                                      "node-a", []))
    assert out.measurement.status is Status.ENV_FAILED and out.fingerprint == recipe.fingerprint
    assert "would build another environment than the run's" in out.measurement.reason
    job = TakeJob(base=base, recipe=recipe, probe=probe)
    ok = base.model_copy(update={"status": Status.OK, "metrics": {"buffer_kib": 100.0}})
    good = TaskResult(measurement=ok, fingerprint=recipe.fingerprint, proved=Proved(version="0.1.3", revision=shas[3]))
    assert ray_executor._verified(job, good).status is Status.OK
    wrong = good.model_copy(update={"proved": Proved(version="0.1.3", revision=shas[4])})
    skipped = ray_executor._verified(job, wrong)
    assert skipped.status is Status.ENV_FAILED and skipped.metrics == {} and shas[4] in skipped.reason
