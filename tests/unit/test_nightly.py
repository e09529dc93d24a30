"""torch's nightly level, its pure parts: a nightly's day and build from its version, a project page's
nightlies (PEP 691 JSON, or PyTorch's PEP 503 HTML), which nightlies lie between two releases, one a day
of one build, the report's verdict with the commit range, a nightly's store fingerprint, and the wheel
re-labelling the slow test serves."""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import zipfile

import pytest

from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult, CommitRange
from bisector.core.points import Point, PointEnv
from bisector.core.search import Outcome
from bisector.envs import EnvSpec
from bisector.errors import UsageError
from bisector.measure.nightly_env import nightly_fingerprint
from bisector.repro.header import header
from bisector.report.common import commit_range_line, headline
from bisector.report.md_visible import verdict_line
from bisector.sources.nightly import (Nightly, between_days, between_releases, by_day, candidate, nightlies_from_page,
                                      nightly_day, parse_day)
from bisector.sources.simple_html import page_from_html
from tests.support.wheel_relabel import relabel

TAG = "cp311-cp311-manylinux_2_28_x86_64"


def page(*versions: str, uploaded: bool = True) -> dict:
    files = []
    for i, v in enumerate(versions):
        entry = {"filename": f"torch-{v}-{TAG}.whl"}
        if uploaded:
            entry["upload-time"] = f"2026-10-{1 + i % 28:02d}T07:00:00Z"
        files.append(entry)
    return {"files": files}


def test_a_nightly_is_dated_by_its_dev_number_and_built_as_its_label_says():
    assert nightly_day("2.14.0.dev20261001+cpu") == dt.date(2026, 10, 1)
    assert nightly_day("2.14.0") is None and nightly_day("2.14.0.dev3") is None and nightly_day("2.14.0.dev20261399") is None
    assert parse_day("2026-10-01") == (dt.date(2026, 10, 1), None)
    assert parse_day("20261001") == (dt.date(2026, 10, 1), None)
    assert parse_day("2.14.0.dev20261001+cu130") == (dt.date(2026, 10, 1), "cu130")
    for bad in ("2.14.0", "yesterday", "2026-13-01"):
        with pytest.raises(UsageError, match="neither a day"):
            parse_day(bad)


def test_a_page_lists_its_dated_nightlies_by_day_each_build_apart():
    found = nightlies_from_page(page("2.14.0.dev20261002+cpu", "2.14.0.dev20261001+cu130", "2.14.0.dev20261001+cpu",
                                     "2.13.0+cpu", "2.14.0.dev5+cpu"))
    assert [(n.version, str(n.day), n.label) for n in found] == [
        ("2.14.0.dev20261001+cpu", "2026-10-01", "cpu"), ("2.14.0.dev20261001+cu130", "2026-10-01", "cu130"),
        ("2.14.0.dev20261002+cpu", "2026-10-02", "cpu")]
    c = candidate("torch", found[0])
    assert c.kind is CandidateKind.NIGHTLY and c.ref == "2.14.0.dev20261001+cpu" and c.date.tzinfo is not None


def test_one_nightly_a_day_of_the_bases_build_and_a_day_of_other_builds_only_names_the_missing_one():
    found = nightlies_from_page(page("2.14.0.dev20261001+cpu", "2.14.0.dev20261002+cu130", "2.14.0.dev20261003+cpu",
                                     "2.14.0.dev20261003+cu130"))
    days = by_day(found, "cpu")
    assert [n.version for n in days] == ["2.14.0.dev20261001+cpu", "2.14.0.dev20261002+cpu", "2.14.0.dev20261003+cpu"]
    assert days[1].uploaded is None          # not on the index: its measurement says why (a SKIP)


def test_the_nightlies_between_two_releases_are_the_next_releases_dev_versions_up_to_its_upload():
    found = nightlies_from_page(page("2.13.0.dev20260801+cpu", "2.14.0.dev20260820+cpu", "2.14.0.dev20261001+cpu",
                                     "2.14.0.dev20261030+cpu", "2.15.0.dev20261025+cpu"))
    chosen = between_releases(found, "2.13.0", "2.14.0", dt.datetime(2026, 10, 20, tzinfo=dt.timezone.utc), "cpu")
    # 2.14.0.dev begins at 2.13's branch cut, before 2.13.0 is uploaded; nothing after 2.14.0's upload
    assert [n.version for n in chosen] == ["2.14.0.dev20260820+cpu", "2.14.0.dev20261001+cpu"]
    assert between_releases(found, "2.13.0", "2.13.1", None, "cpu") == []     # patch releases: a branch's
    assert [n.version for n in between_days(found, dt.date(2026, 10, 1), dt.date(2026, 10, 30), "cpu")] == [
        "2.14.0.dev20261001+cpu", "2.15.0.dev20261025+cpu", "2.14.0.dev20261030+cpu"]


def test_pytorchs_html_page_reads_as_files_with_their_metadata():
    text = ('<html><body><h1>Links for torch</h1>'
            '<a href="/whl/nightly/cpu/torch-2.14.0.dev20261001%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl'
            '#sha256=abc" data-dist-info-metadata="sha256=def">torch-2.14.0.dev20261001+cpu-cp311-cp311-manylinux_2_28'
            '_x86_64.whl</a><br/><a href="old-1.0-py3-none-any.whl" data-yanked="">old-1.0-py3-none-any.whl</a>'
            '</body></html>')
    files = page_from_html(text, "https://example.invalid/whl/nightly/cpu/torch/")["files"]
    assert files[0] == {"filename": "torch-2.14.0.dev20261001+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                        "url": "https://example.invalid/whl/nightly/cpu/torch-2.14.0.dev20261001%2Bcpu-cp311-cp311-"
                               "manylinux_2_28_x86_64.whl",
                        "hashes": {"sha256": "abc"}, "yanked": False, "core-metadata": {"sha256": "def"}}
    assert files[1]["url"] == "https://example.invalid/whl/nightly/cpu/torch/old-1.0-py3-none-any.whl"
    assert files[1]["yanked"] is True and files[1]["core-metadata"] is False
    assert [n.version for n in nightlies_from_page({"files": files})] == ["2.14.0.dev20261001+cpu"]


def _result(commits: CommitRange) -> BisectResult:
    def point(ref: str, value: float) -> Point:
        return Point(ref=ref, kind=CandidateKind.NIGHTLY, value=value)
    return BisectResult(run_id="r1", package="torch", mode=CandidateKind.NIGHTLY, status=Outcome.FOUND, reason="x",
                        criterion="buffer_kib > 200", metric="buffer_kib",
                        last_good=point("2.14.0.dev20261003+cpu", 100.0), first_bad=point("2.14.0.dev20261004+cpu", 400.0),
                        commit_range=commits, compare_link=commits.link)


def test_the_verdict_names_the_first_bad_nightly_its_day_and_the_commits_between_the_two():
    a, b = "a" * 40, "b" * 40
    link = f"https://github.com/pytorch/pytorch/compare/{a}...{b}"
    counted = _result(CommitRange(index_url="https://nightly.example.invalid/", older=a, newer=b, link=link, commits=3))
    line = headline(counted)
    assert line.startswith("First bad: torch 2.14.0.dev20261004+cpu (nightly of 2026-10-04) — ")
    assert line.endswith(f"(last good: 2.14.0.dev20261003+cpu); commits aaaaaaaaaa..bbbbbbbbbb (3 commits): {link}")
    assert commit_range_line(counted) == ("commits: 3 between aaaaaaaaaa and bbbbbbbbbb (git rev-list --count in the "
                                          "--repo clone); nightlies from https://nightly.example.invalid/")
    md = verdict_line(counted)[0]
    assert "(nightly of 2026-10-04)" in md and f"[`aaaaaaaaaa...bbbbbbbbbb`]({link}) (3 commits)" in md
    uncounted = _result(CommitRange(older=a, newer=b, link=link, why_no_count="give --repo"))
    assert headline(uncounted).endswith(f"commits aaaaaaaaaa..bbbbbbbbbb: {link}")
    assert commit_range_line(uncounted) == "commits: not counted between aaaaaaaaaa and bbbbbbbbbb (give --repo)"


def test_a_nightlys_store_fingerprint_needs_no_index():
    c = candidate("torch", Nightly(version="2.14.0.dev20261004+cpu", day=dt.date(2026, 10, 4), label="cpu"))
    spec = EnvSpec(name="plain", companions={"helper": "1.0"})
    elsewhere = spec.model_copy(update={"index_url": "https://a.example.invalid/simple", "extra_index_urls": ["https://b"]})
    other_day = c.model_copy(update={"ref": "2.14.0.dev20261005+cpu"})
    assert nightly_fingerprint(spec, c) == nightly_fingerprint(elsewhere, c) != nightly_fingerprint(spec, other_day)
    assert nightly_fingerprint(spec, c) != nightly_fingerprint(spec.model_copy(update={"companions": {}}), c)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_a_relabelled_wheel_is_a_valid_wheel_of_the_new_version_with_a_true_record(tmp_path):
    files = {"torch/__init__.py": b"from .version import __version__\n",
             "torch/version.py": b"__version__ = '2.13.0+cpu'\ngit_version = 'cf30153c4c131c8164ee7798e5022d810682e2cb'\n",
             "torch-2.13.0+cpu.dist-info/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n\nabout\n",
             "torch-2.13.0+cpu.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: " + TAG.encode() + b"\n"}
    record = [f"{p},{_record_hash(d)},{len(d)}" for p, d in files.items()] + ["torch-2.13.0+cpu.dist-info/RECORD,,"]
    source = tmp_path / f"torch-2.13.0+cpu-{TAG}.whl"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr("torch-2.13.0+cpu.dist-info/RECORD", "\n".join(record) + "\n")
    wheel = relabel(source, "2.14.0.dev20261004+cpu", git_version="b" * 40, requires=["pytorch-triton==3.7.0+0123456789"],
                    extra_files={"torch/_bisector_planted.txt": b"x\n"})
    assert wheel.filename == f"torch-2.14.0.dev20261004+cpu-{TAG}.whl"
    written = wheel.write(tmp_path / wheel.filename)
    assert written.stat().st_size == wheel.size and hashlib.sha256(written.read_bytes()).hexdigest() == wheel.sha256
    assert b"".join(wheel.chunks(10, 60)) == written.read_bytes()[10:60]
    with zipfile.ZipFile(written) as zf:
        assert zf.testzip() is None
        dist = "torch-2.14.0.dev20261004+cpu.dist-info"
        assert zf.read("torch/version.py").decode().splitlines() == ["__version__ = '2.14.0.dev20261004+cpu'",
                                                                     "git_version = '" + "b" * 40 + "'"]
        meta = zf.read(f"{dist}/METADATA").decode()
        assert "Version: 2.14.0.dev20261004+cpu\nRequires-Dist: pytorch-triton==3.7.0+0123456789\n\nabout" in meta
        lines = [line.rsplit(",", 2) for line in zf.read(f"{dist}/RECORD").decode().splitlines()]
        assert {path for path, _, _ in lines} == set(zf.namelist())
        for path, digest, size in lines:
            if digest:
                assert (digest, int(size)) == (_record_hash(zf.read(path)), len(zf.read(path))), path


def test_the_repro_pins_the_two_nightlies_by_exact_version_and_index():
    env = {"python": "3.11.7", "torch": "2.14.0.dev20261003+cpu", "torch git": "a" * 40,
           "pytorch-triton": "3.7.0+0123456789"}
    result = _result(CommitRange(index_url="https://nightly.example.invalid/whl/nightly/cpu/", older="a" * 40,
                                 newer="b" * 40)).model_copy(update={"command": "bisector run --package torch"})
    result.last_good.env = PointEnv.model_validate(env)
    result.first_bad.env = PointEnv.model_validate({**env, "torch": "2.14.0.dev20261004+cpu", "torch git": "b" * 40})
    head = "\n".join(header(result, "repro.py", "exit 0", None))
    for venv, day in (("good", "20261003"), ("bad", "20261004")):   # torch brings its own pytorch-triton build
        assert (f"# $ {venv}/bin/pip install --pre --index-url https://nightly.example.invalid/whl/nightly/cpu/ "
                f"torch==2.14.0.dev{day}+cpu\n") in head, head
    assert "pytorch-triton==3.7.0" not in head   # never the release of that name from another index
    assert "# first bad: torch 2.14.0.dev20261004+cpu (torch git: " + "b" * 40 in head
