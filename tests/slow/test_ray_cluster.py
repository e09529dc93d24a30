"""The ray executor on a real two-node cluster (``ray.cluster_utils.Cluster``, one logical GPU per
node, one cluster for the module): tasks spread over both nodes, a 40-commit bisect and an 8-cell
matrix equal the local ones, and a worker killed mid-probe is retried on the other node."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import Status
from bisector.envs import EnvManager, load_env_spec
from bisector.measure.measurer import Measurer
from bisector.job.probe import ScriptProbe
from bisector.store.storage import Store
from tests.support.gitfixture import make_repo
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.raytools import HOLD, alive, commit_args, events, loopback, parent_of, wait_for

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from bisector.measure.ray_executor import RayExecutor  # noqa: E402

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def cluster():
    loopback()
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
    made.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=made.address, log_to_driver=False)
    yield made
    ray.shutdown()
    made.shutdown()


@pytest.fixture(scope="module")
def repo40(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("repo"), commits=40, bad_at=23)


def _rows(store: Path) -> dict:
    return {m.key: (m.candidate, m.repeat, m.status, m.metrics) for m in Store(store).measurements_for("tinypkg")}


def _hold(log: Path, go: str = "-") -> list[str]:
    return ["--probe", str(HOLD), "--probe-arg", str(log), "--probe-arg", go, "--probe-arg", "0"]


def test_bisect_on_the_cluster_equals_local_and_spreads_over_both_nodes(cluster, repo40, tmp_path, env_cache,
                                                                      plain_spec, monkeypatch):
    repo, shas = repo40
    probe = _hold(tmp_path / "log.jsonl")
    on_ray, here = tmp_path / "ray.db", tmp_path / "local.db"
    assert main(commit_args(repo, shas, on_ray, env_cache, plain_spec, *probe, "--jobs", "2", "--executor", "ray")) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # local, on two GPUs named like the cluster's
    assert main(commit_args(repo, shas, here, env_cache, plain_spec, *probe, "--jobs", "2")) == 0
    results = [Store(s).get_run().result for s in (on_ray, here)]
    assert [r["first_bad"]["sha"] for r in results] == [shas[23], shas[23]]
    assert [[(s["candidate"], s["verdict"], s["value"]) for s in r["steps"]] for r in results][0] == \
        [(s["candidate"], s["verdict"], s["value"]) for s in results[1]["steps"]]
    assert _rows(on_ray) == _rows(here) and results[0]["probes_run"] == results[1]["probes_run"]
    nodes = {m.details["node"] for m in Store(on_ray).measurements_for("tinypkg")}
    assert nodes == {n["NodeID"] for n in ray.nodes() if n["Alive"]} and len(nodes) == 2


def test_a_worker_killed_mid_probe_is_retried_on_the_other_node(cluster, repo40, tmp_path, env_cache, plain_spec):
    repo, shas = repo40
    log, go = tmp_path / "log.jsonl", tmp_path / "go"
    killed: list[dict] = []

    def kill_first_probes_worker():
        first = wait_for(lambda: [e for e in events(log) if e["event"] == "start"], what="a probe to start")[0]
        os.kill(parent_of(first["ppid"]), signal.SIGKILL)  # the Ray worker running that task (above the launcher)
        killed.append(first)
        go.touch()

    helper = threading.Thread(target=kill_first_probes_worker)
    helper.start()
    args = commit_args(repo, shas, tmp_path / "s.db", env_cache, plain_spec, *_hold(log, str(go)), "--jobs", "2",
                       "--executor", "ray")
    assert main(args) == 0
    helper.join(timeout=60)
    store = Store(tmp_path / "s.db")
    assert store.get_run().result["first_bad"]["sha"] == shas[23]
    wait_for(lambda: not alive(killed[0]["pid"]), timeout=10, what="the orphaned probe to die with its worker")
    [retried] = [m for m in store.measurements_for("tinypkg") if m.details.get("attempts")]
    assert retried.candidate == killed[0]["candidate"] and retried.status is Status.OK
    assert retried.details["attempts"] == 2 and retried.details["lost"][0].startswith("WorkerCrashedError on node ")
    assert retried.details["node"][:12] not in retried.details["lost"][0]  # the retry ran on the other node


def test_retries_spent_are_a_lost_skip_with_the_reason(cluster, repo40, tmp_path, env_cache, plain_spec):
    repo, shas = repo40
    log = tmp_path / "log.jsonl"
    probe = ScriptProbe(path=HOLD, args=[str(log), str(tmp_path / "never"), "0"])
    measurer = Measurer(Store(tmp_path / "s.db"), EnvManager(env_cache), load_env_spec(str(plain_spec), Path(".")),
                        probe, RayExecutor(cache_dir=str(env_cache)), repo_path=repo, run_id="t")

    def kill_every_attempt():
        for n in range(3):
            start = wait_for(lambda: [e for e in events(log) if e["event"] == "start"][n:], what=f"attempt {n}")[0]
            os.kill(parent_of(start["ppid"]), signal.SIGKILL)

    helper = threading.Thread(target=kill_every_attempt)
    helper.start()
    m = measurer.measure(Candidate(package="tinypkg", kind=CandidateKind.COMMIT, ref=shas[5]))
    helper.join(timeout=60)
    assert m.status is Status.LOST and m.metrics == {}
    assert m.reason.startswith("lost 3 times, retries spent: WorkerCrashedError on node ")
    assert Store(tmp_path / "s.db").get_measurement(m.key).status is Status.LOST  # stored, and retried on rerun
    assert measurer.stored(Candidate(package="tinypkg", kind=CandidateKind.COMMIT, ref=shas[5]), 0) is None


def test_an_8_cell_matrix_on_the_cluster_equals_the_local_matrix(cluster, tmp_path, env_cache, plain_spec,
                                                                 monkeypatch):
    idx = LocalIndex(tmp_path / "idx")
    versions = [f"1.{i}.0" for i in range(8)]
    for day, version in enumerate(versions):
        source = f"BUFFER_KIB = {400 if day >= 4 else 100}\ndef step():\n    return len(bytearray(BUFFER_KIB * 1024))\n"
        idx.add(build_wheel(tmp_path / "w", "tinypkg", version, module_source=source), T0 + dt.timedelta(days=day))
    config = tmp_path / "bisect.toml"
    config.write_text(f'[matrix]\nenv = "{plain_spec}"\n[matrix.grid]\ntinypkg = {json.dumps(versions)}\n'
                      f'[probe]\npath = "{HOLD}"\nargs = ["{tmp_path / "log"}", "-", "0"]\n'
                      '[criterion]\nmetric = "buffer_kib"\nmax_increase = "50%"\n')
    outs = {}
    with idx.serve() as url:
        for name, extra in (("ray", ["--executor", "ray"]), ("local", [])):
            if name == "local":
                monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
            code = main(["matrix", "--config", str(config), "--index-url", url, "--store", str(tmp_path / f"{name}.db"),
                         "--cache-dir", str(env_cache), "--jobs", "2", "--out", str(tmp_path / name), *extra])
            assert code == 1  # the step along the versions (1.3.0 -> 1.4.0), confirmed: a regression in one run
            outs[name] = json.loads((tmp_path / name / "matrix.json").read_text())
    cells = {name: [(c["versions"], c["status"], c["metrics"], c["verdict"]) for c in out["cells"]]
             for name, out in outs.items()}
    assert len(cells["ray"]) == 8 and cells["ray"] == cells["local"]
    steps = {name: [(s["good"], s["bad"], s["confirmed"]) for s in out["version_steps"]] for name, out in outs.items()}
    assert steps["ray"] == steps["local"] == [("1.3.0", "1.4.0", True)]
    assert [c[2]["buffer_kib"] for c in cells["ray"]] == [100.0] * 4 + [400.0] * 4
    assert _rows(tmp_path / "ray.db") == _rows(tmp_path / "local.db")
