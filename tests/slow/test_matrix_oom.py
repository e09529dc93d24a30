"""A planted partial OOM in a nightly matrix: the real ga_memory probe (the accelerate loop, a tiny model
from ``--model-factory``) over a package whose new release runs out of memory at its largest width while
the other widths are measured. It is an OOM finding naming the width, a regression against the night
before (running out is the regression), confirmed on re-measurement: exit 1, on screen and in matrix.md.
accelerate comes from the package index this machine is configured for (BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import datetime as dt
import json
import os

import accelerate
import pytest

from bisector.sources.installer_config import resolve_index_url
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.tinylm import tiny_lm_source
from tests.unit.test_matrix import matrix_cli

pytestmark = pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)   # recent: the pinned accelerate's needs resolve as of it
OOM_AT = '''

_build = build


def build(hidden, **kw):  # the planted partial OOM: the largest width does not fit
    if hidden >= 64:
        raise torch.OutOfMemoryError(f"out of memory building hidden={hidden} (planted)")
    return _build(hidden, **kw)
'''
ARGS = ["--loop=accelerate", "--model-factory=oompkg:build", "--precisions=fp32", "--ga=1,2", "--sizes=32,48,64",
        "--no-gradient-checkpointing", "--no-attribution"]


def test_a_partial_oom_is_an_oom_finding_with_the_width_that_failed(tmp_path, env_cache, capsys):
    idx = LocalIndex(tmp_path / "idx")
    idx.add(build_wheel(tmp_path / "w", "oompkg", "1.0.0", module_source=tiny_lm_source()), T0)
    spec = tmp_path / "oom.toml"
    spec.write_text(f'name = "oom"\nbase = "current"\nextra_index_urls = ["{resolve_index_url(None)}"]\n'
                    f'[companions]\naccelerate = "=={accelerate.__version__}"\n')
    config = tmp_path / "bisect.toml"
    config.write_text(f'[matrix]\nenv = "{spec}"\n[matrix.grid]\noompkg = "latest"\n[probe]\nname = "ga_memory"\n'
                      f'args = {json.dumps(ARGS)}\n[criterion]\nmetric = "ga_cost_bytes_per_param"\n'
                      'max_increase = "50%"\n')
    with idx.serve() as url:
        argv = ["--config", str(config), "--index-url", url, "--store", str(tmp_path / "s.db"),
                "--cache-dir", str(env_cache), "--out", str(tmp_path / "out")]
        first = matrix_cli(*argv)
        capsys.readouterr()
        idx.add(build_wheel(tmp_path / "w", "oompkg", "1.1.0", module_source=tiny_lm_source() + OOM_AT),
                T0 + dt.timedelta(days=1))
        second = matrix_cli(*argv)
    shown = capsys.readouterr()
    out = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert first == 0 and second == 1 and out["exit_code"] == 1
    [cell] = out["cells"]
    assert cell["versions"] == {"oompkg": "1.1.0"} and cell["status"] == "ok"
    assert cell["oom"] == ["fp32.ga1.h64", "fp32.ga2.h64"]
    assert cell["reason"] == "out of memory at width h64 (fp32.ga1.h64, fp32.ga2.h64)"
    assert cell["verdict"] == "regression" and cell["confirmed"] is True
    assert "regression at latest [oompkg 1.0.0 -> 1.1.0] (out of memory at width h64" in shown.out
    assert "not measured: oompkg==1.1.0 (latest): ok, partly: out of memory at width h64" in shown.out
    report = (tmp_path / "out" / "matrix.md").read_text()
    assert "**REGRESSION** (out of memory at width h64 (fp32.ga1.h64, fp32.ga2.h64), confirmed)" in report
    assert "ok, partly: out of memory at width h64" in report
