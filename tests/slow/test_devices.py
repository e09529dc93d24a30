"""The run's device is the probe's device: BISECTOR_DEVICE and one GPU by id for each probe, the
device kind in the store key, and a result measured elsewhere (or with another meter) stored as a
SKIP-class measurement, never compared. Real environments, real probe subprocesses."""
from __future__ import annotations

import datetime as dt

import pytest

from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import Status
from bisector.envs import EnvManager, EnvSpec
from bisector.measure.gpus import Gpu, GpuPool
from bisector.measure.executors import LocalExecutor
from bisector.measure.measurer import Measurer
from bisector.job.probe import ScriptProbe
from bisector.store.storage import Store
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
# Claims whatever device $CLAIM says (default: the one it was told), GPU model $CLAIM_NAME, and
# meter $METER_<candidate>.
PROBE = """
import json, os
cand = os.environ["BISECTOR_CANDIDATE"].replace(".", "_")
result = {"metrics": {"m": 1.0}, "device": {"type": os.environ.get("CLAIM") or os.environ["BISECTOR_DEVICE"],
                                          "name": os.environ.get("CLAIM_NAME")},
          "meter": os.environ.get("METER_" + cand, "cpu-dispatch"),
          "seen": {"device": os.environ["BISECTOR_DEVICE"], "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                   "cpus": os.environ["BISECTOR_CPUS"]}}
json.dump(result, open(os.environ["BISECTOR_RESULT"], "w"))
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("devidx")
    idx = LocalIndex(root / "idx")
    for i, version in enumerate(("1.0", "1.1")):
        idx.add(build_wheel(root / "w", "devpkg", version), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def _measurer(tmp_path, env_cache, index, gpus, cpus=1):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    envs = EnvManager(env_cache)
    return Measurer(Store(tmp_path / "s.db"), envs, EnvSpec(name="plain"), ScriptProbe(path=script),
                    LocalExecutor(envs, GpuPool(gpus)), index_url=index, cpus=cpus)


def _cand(version):
    return Candidate(package="devpkg", kind=CandidateKind.RELEASE, ref=version, date=T0)


def test_the_probe_is_told_its_device_gpu_and_cores(tmp_path, env_cache, index):
    m = _measurer(tmp_path, env_cache, index, ["GPU-1111"], cpus=3).measure(_cand("1.0"))
    assert m.status is Status.OK
    assert m.result.fields()["seen"] == {"device": "cuda", "gpu": "GPU-1111", "cpus": "3"}
    cpu = _measurer(tmp_path, env_cache, index, []).measure(_cand("1.0"))
    assert cpu.result.fields()["seen"] == {"device": "cpu", "gpu": None, "cpus": "1"}
    assert cpu.key != m.key  # the device kind is part of the store key


def test_a_result_from_another_device_is_a_skip_not_a_number(tmp_path, env_cache, index, monkeypatch):
    monkeypatch.setenv("CLAIM", "cpu")  # a torch candidate that could not start CUDA fell back to the CPU
    m = _measurer(tmp_path, env_cache, index, ["0"]).measure(_cand("1.0"))
    assert m.status is Status.WRONG_DEVICE and m.metrics == {}
    assert m.reason == "the probe ran on cpu, the run measures on cuda"


def test_a_result_with_another_meter_than_the_runs_is_a_skip(tmp_path, env_cache, index, monkeypatch):
    monkeypatch.setenv("METER_1_1", "cuda")
    measurer = _measurer(tmp_path, env_cache, index, [])
    first, second = measurer.measure(_cand("1.0")), measurer.measure(_cand("1.1"))
    assert first.status is Status.OK and second.status is Status.WRONG_DEVICE
    assert "meter cuda, the run with cpu-dispatch" in second.reason


def test_a_result_from_another_gpu_model_than_the_store_key_names_is_a_skip(tmp_path, env_cache, index, monkeypatch):
    """The key says which GPU model measured (tests/unit/test_gpus.py); a result whose torch saw another is
    not stored under it as a number."""
    h200 = Gpu(id="GPU-1111", name="NVIDIA H200", memory_mib=143771, driver="570.86.15")
    monkeypatch.setenv("CLAIM_NAME", "NVIDIA H200")
    assert _measurer(tmp_path, env_cache, index, [h200]).measure(_cand("1.0")).status is Status.OK
    monkeypatch.setenv("CLAIM_NAME", "NVIDIA A100-SXM4-80GB")
    m = _measurer(tmp_path, env_cache, index, [h200]).measure(_cand("1.1"))
    assert m.status is Status.WRONG_DEVICE and m.metrics == {}
    assert m.reason == "the probe ran on NVIDIA A100-SXM4-80GB, the store key names NVIDIA H200"
