"""Issue 47, item 7: every answer of a package index (release and nightly indexes) is checked before it is used,
read within a connect timeout and a deadline for the whole answer. Each kind is a real loopback HTTP server
(tests/support/hostile_index.py) answering what a broken or hostile index would, and runs through the hostile
battery's checks (tests/process/test_hostile.py: exit 2, one line naming the index, nothing created or stored,
no internal error); a kind that hangs fails at 60 s (a guard, not a speed claim): a JSON list where an object
belongs, upload times that are text, integers or naive and aware mixed, arrays nested 100,000 deep, a server
that trickles its answer, 10,000 nightly days without the one asked for."""
from __future__ import annotations

import dataclasses
import datetime as dt
import signal

import pytest

from bisector.sources.index import list_releases
from bisector.sources.nightly import list_nightlies
from tests.process import test_hostile as battery
from tests.process.test_hostile import world  # noqa: F401 - the battery's world (a fixture)
from tests.support.hostile import Kind
from tests.support.hostile_index import Answer, HostileIndex, json_answer

DEEP = "[" * 100_000 + "]" * 100_000


def wheel(version: str, package: str = "tinypkg") -> str:
    return f"{package}-{version}-py3-none-any.whl"


def releases(*files: dict) -> Answer:
    return json_answer({"meta": {"api-version": "1.1"}, "files": list(files)})


GOOD = [{"filename": wheel(v), "url": wheel(v), "upload-time": f"2024-03-0{i + 1}T00:00:00Z"}
        for i, v in enumerate(("1.0.0", "1.1.0", "1.2.0"))]
MIXED = [{**GOOD[0], "upload-time": "2024-03-01T00:00:00"}, {"filename": "tinypkg-1.0.0.tar.gz", "url": "x.tar.gz",
                                                              "upload-time": "2024-02-28T00:00:00+02:00"}, *GOOD[1:]]
NIGHTLY = "2.14.0.dev{day}+cpu"


def nightly_page(days: int, mixed: bool = False) -> Answer:
    start = dt.date(2000, 1, 1)
    files = []
    for i in range(days):
        version = NIGHTLY.format(day=(start + dt.timedelta(days=i)).strftime("%Y%m%d"))
        files.append({"filename": wheel(version, "torch").replace("-py3-none-any", "-cp311-cp311-linux_x86_64"),
                      "url": "x.whl", "upload-time": f"{start + dt.timedelta(days=i)}T08:00:00Z"})
        if mixed:   # the same nightly again, its time without a zone
            files.append({**files[-1], "filename": files[-1]["filename"].replace("cp311-cp311", "cp312-cp312"),
                          "upload-time": f"{start + dt.timedelta(days=i)}T07:00:00"})
    return json_answer({"files": files})


RUN = ["run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0.0", "--bad", "1.2.0", "--index-url",
       "{hostile}", "--env", "{spec}", "--probe-cmd", "true", "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache"]
NIGHTLIES = ["run", "--package", "torch", "--mode", "nightlies", "--nightly-index", "{hostile}", "--good",
             "2000-01-01", "--bad", "2027-05-19", "--env", "{spec}", "--probe-cmd", "true", "--store", "{tmp}/s.db",
             "--cache-dir", "{tmp}/cache"]
INDEX = "index http://127.0.0.1"
CASES = [   # (name, the page, argv, a piece of the one line)
    ("a JSON list where an object belongs", json_answer([GOOD[0]]), RUN, "is not a project page: a JSON list"),
    ("a file that is a list", releases(["tinypkg-1.0.0-py3-none-any.whl"]), RUN, "not a valid project page: files.0"),
    ("files that are an object", json_answer({"files": {"a": GOOD[0]}}), RUN, "not a valid project page: files"),
    ("a file without its name", releases({"url": "x.whl"}), RUN, "files.0.filename"),
    ("hashes that are a list", releases({**GOOD[0], "hashes": ["sha256", "x"]}), RUN, "files.0.hashes"),
    ("an upload time that is text", releases({**GOOD[0], "upload-time": "yesterday"}, *GOOD[1:]), RUN,
     "'yesterday' is not an ISO 8601 time"),
    ("an upload time that is an integer", releases({**GOOD[0], "upload-time": 1709251200}, *GOOD[1:]), RUN,
     "an upload time is ISO 8601 text, not int"),
    ("an array nested 100,000 deep", Answer(DEEP.encode()), RUN, "is JSON nested too deeply to read"),
    ("a file with a field nested 100,000 deep", Answer(('{"files": [{"filename": "x", "extra": ' + DEEP + "}]}").encode()),
     RUN, "is JSON nested too deeply to read"),
    ("not JSON at all", Answer(b"{\"files\": [\x00"), RUN, "is not JSON"),
    ("a server that trickles its answer", Answer(b'{"files": []}' * 100, trickle_s=0.2), RUN,
     "did not answer in full within 2 s"),
    ("upload times naive and aware mixed", releases(*MIXED), [*RUN[:8], "9.9.9", *RUN[9:]],
     "version 9.9.9 does not exist (nearest: 1.1.0, 1.2.0)"),
    ("a nightly page that is a JSON list", json_answer([]), NIGHTLIES, "is not a project page: a JSON list"),
    ("nightly upload times naive and aware mixed", nightly_page(3, mixed=True), NIGHTLIES,
     "--bad 2027-05-19: no nightly of that day on the nightly index (nearest: 2000-01-02, 2000-01-03)"),
    ("10,000 nightly days without the one asked for", nightly_page(10_000), NIGHTLIES,
     "--bad 2027-05-19: no nightly of that day on the nightly index (nearest: 2027-05-17, 2027-05-18)"),
]
KINDS = [Kind("index", name, argv, 2, said, env={"BISECTOR_INDEX_DEADLINE_S": "2"}) for name, _, argv, said in CASES]
PAGES = {name: page for name, page, _, _ in CASES}
BATTERY = [k.id for k in KINDS] + ["index: a page read through the library: naive and aware times are one clock"]


@pytest.fixture
def hang_guard():
    """A kind that hangs fails after 60 s instead of stalling the suite (the issue: each within 60 s)."""
    def stop(signum, frame):
        raise TimeoutError("no answer within 60 s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_a_malformed_index_answer_is_one_line_naming_the_index(kind, world, tmp_path, monkeypatch, capsys, hang_guard):
    package = "torch" if "--nightly-index" in kind.argv else "tinypkg"
    with HostileIndex({package: PAGES[kind.name]}).serve() as url:
        kind = dataclasses.replace(kind, argv=[a.replace("{hostile}", url) for a in kind.argv])
        said = battery.run_kind(kind, world, tmp_path, monkeypatch, capsys)
    assert INDEX in said or "--bad 2027" in said or "version 9.9.9" in said, said
    assert "internal error" not in said


def test_naive_and_aware_upload_times_read_as_one_clock(hang_guard):
    with HostileIndex({"tinypkg": releases(*MIXED), "torch": nightly_page(3, mixed=True)}).serve() as url:
        found = list_releases(url, "tinypkg")
        nightlies = list_nightlies(url, "torch")
    first = found[0]
    assert [r.version for r in found] == ["1.0.0", "1.1.0", "1.2.0"]
    assert first.uploaded == dt.datetime(2024, 2, 27, 22, tzinfo=dt.timezone.utc)   # the earlier file: +02:00
    assert [n.uploaded.hour for n in nightlies] == [7, 7, 7] and all(n.uploaded.tzinfo for n in nightlies)
