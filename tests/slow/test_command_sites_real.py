"""Where the bytes went, for a user's program (issue 45 item 7): a bisect of an unmodified script over a tiny package
whose planted release allocates a buffer in a named function; the report at the culprit and ``probe --explain``
name that function's file:line and its bytes, from the measurements the bisect took (nothing re-run)."""
from __future__ import annotations

import datetime as dt
import json
import textwrap

import pytest

from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.cli import run_bisector as _bisector

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)

# from 1.2.0 on, tinysite's forward builds a 6 MB buffer in _make_buffer and keeps it alive through its forward
SOURCE = """
import torch

PLANTED = {planted}


def _make_buffer(n):
    return torch.zeros(n, dtype=torch.uint8)


def forward(x):
    held = _make_buffer(6_000_000) if PLANTED else None
    out = (x * 2).sum()
    return out + (held[:1].float().sum() * 0 if held is not None else 0)
"""
# the wheel's module is its __version__ line, then SOURCE
PLANTED_LINE = f"tinysite/__init__.py:{2 + SOURCE.splitlines().index('    return torch.zeros(n, dtype=torch.uint8)')} _make_buffer"

TRAIN = """
import torch
import tinysite

w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    big = torch.ones(2_000_000, dtype=torch.uint8)   # the program's own 2 MB, the same in every version
    loss = tinysite.forward(w) + big[:1].float().sum() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")
"""


@pytest.fixture(scope="module")
def site_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("siteindex")
    idx = LocalIndex(root / "idx")
    for i, v in enumerate(["1.0.0", "1.1.0", "1.2.0", "1.3.0"]):
        idx.add(build_wheel(root / "w", "tinysite", v, module_source=SOURCE.format(planted=v >= "1.2.0")),
                T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def test_the_report_at_the_culprit_names_the_planted_function_and_its_bytes(site_index, tmp_path, env_cache,
                                                                            plain_spec):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    where = ["--index-url", site_index, "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store",
             str(tmp_path / "s.db")]
    run = _bisector("run", "--package", "tinysite", "--mode", "releases", "--good", "1.0.0", "--bad", "1.3.0", *where,
                    "--json", "--", "python", "train.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert (out["last_good"]["ref"], out["first_bad"]["ref"]) == ("1.1.0", "1.2.0")
    report = _bisector("report", out["run_id"], "--format", "json", *where[-2:], cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    said = [line for line in json.loads(report.stdout)["explanation"] if "by allocation site" in line]
    assert len(said) == 1, report.stdout[-3000:]
    assert (f"{PLANTED_LINE} (uint8 [6000000]) grew by 5.72 MiB (0 B → 5.72 MiB)") in said[0], said[0]
    assert "train.py" not in said[0]   # the program's own 2 MB did not move
    # one version, --explain: where its step peak's bytes live (the stored measurement: nothing re-run)
    probe = _bisector("probe", "--with", "tinysite==1.2.0", *where, "--explain", "--", "python", "train.py",
                      cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    line = next(x for x in probe.stdout.splitlines() if "by allocation site" in x)
    assert f"{PLANTED_LINE} (uint8 [6000000]) 5.72 MiB" in line and "train.py:8 <module> (uint8 [2000000]) 1.91 MiB" in line
