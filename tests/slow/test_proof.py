"""A new environment is checked from disk and its probe's own imports prove it: the health check's
second interpreter is gone, and a wrong environment is still a SKIP, never a measurement. Real
environments (a loopback index), real probe subprocesses."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import Status
from bisector.envs import EnvManager, EnvSpec
from bisector.envs.model.info import read_info
from bisector.measure.executors import LocalExecutor
from bisector.measure.gpus import GpuPool
from bisector.measure.measurer import Measurer
from bisector.job.probe import ExitCodeProbe, ProbeBase, ScriptProbe
from bisector.store.storage import Store
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
IMPORTS = "import json, os, tinypkg\njson.dump({'metrics': {'v': float(tinypkg.__version__.split('.')[1])}}, " \
          "open(os.environ['BISECTOR_RESULT'], 'w'))\n"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("proofidx")
    idx = LocalIndex(root / "idx")
    idx.add(build_wheel(root / "w", "tinypkg", "1.0"), T0)
    liar = '__version__ = "1.1"  # the wheel says 1.2, the code says 1.1\n'
    idx.add(build_wheel(root / "w", "tinypkg", "1.2", module_source=liar), T0 + dt.timedelta(days=1))
    with idx.serve() as url:
        yield url


def _measure(tmp_path, index, version, probe: ProbeBase):
    envs = EnvManager(tmp_path / "cache", defer_health=True)
    measurer = Measurer(Store(tmp_path / "s.db"), envs, EnvSpec(name="plain"), probe, LocalExecutor(envs, GpuPool([])),
                        index_url=index)
    m = measurer.measure(Candidate(package="tinypkg", kind=CandidateKind.RELEASE, ref=version, date=T0))
    return m, read_info(envs.layout.env_dir(measurer._address(
        Candidate(package="tinypkg", kind=CandidateKind.RELEASE, ref=version, date=T0), 0).recipe.dir_name))


def test_a_probe_that_imports_the_candidate_proves_it(tmp_path, index):
    script = tmp_path / "p.py"
    script.write_text(IMPORTS)
    m, info = _measure(tmp_path, index, "1.0", ScriptProbe(path=script))
    assert m.status is Status.OK and m.metrics == {"v": 0.0}
    assert info.health == "proved" and info.health_seconds < 0.5   # no interpreter started for the check


def test_a_wrong_environment_proved_by_the_probe_is_a_skip(tmp_path, index):
    script = tmp_path / "p.py"
    script.write_text(IMPORTS)
    m, info = _measure(tmp_path, index, "1.2", ScriptProbe(path=script))
    assert m.status is Status.ENV_FAILED and m.metrics == {}
    assert "tinypkg.__version__ is 1.1" in m.reason and info.health == "static"


def test_a_probe_that_imports_nothing_gets_the_full_health_check(tmp_path, index):
    m, info = _measure(tmp_path, index, "1.2", ExitCodeProbe(cmd="true"))   # an exit-code probe: no proof
    assert m.status is Status.ENV_FAILED and "tinypkg.__version__ is 1.1" in m.reason
    ok, info = _measure(tmp_path / "again", index, "1.0", ExitCodeProbe(cmd="true"))
    assert ok.status is Status.EXIT_CODE and info.health == "imported"
    assert json.dumps(ok.details["proved"])   # what the check proved travels with the measurement
