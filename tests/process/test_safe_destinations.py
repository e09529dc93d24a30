"""Issue 34, "files written safely": the files ``bisector matrix`` writes into ``--out``, ``--html`` and ``--issues``
(matrix.md, matrix.json, index.html, the plots, the bisect reports, the issue drafts) are checked before any work,
not only their directories: a directory, a symlink or a FIFO where one of them goes is one line and exit 2 with
nothing created or stored (it was exit 1 after the whole run, an IsADirectoryError). Each kind runs through the
hostile battery's checks (tests/process/test_hostile.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.process import test_hostile as battery
from tests.process.test_hostile import MATRIX_TOML, world  # noqa: F401 - the battery's world (a fixture)
from tests.support.hostile import Kind


def _planted(rel: str, what: str):
    """A setup that puts ``what`` (dir, link, fifo) at ``{tmp}/rel``."""
    def setup(tmp: Path, world) -> None:
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "dir":
            path.mkdir()
        elif what == "link":
            (tmp / "victim").write_text("keep\n")
            path.symlink_to(tmp / "victim")
        else:
            os.mkfifo(path)
    return setup


def _matrix(*extra: str) -> list[str]:
    return ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache",
            "--out", "{tmp}/out", *extra]


CASES = [("--out", "out/matrix.md", "dir", (), "matrix.md there is a directory"),
         ("--out", "out/matrix.json", "fifo", (), "matrix.json there is a FIFO"),
         ("--out", "out/matrix.md", "link", (), "matrix.md there is a symlink"),
         ("--out", "out/plot-m.png", "dir", (), "plot-m.png there is a directory"),
         ("--out", "out/tinypkg-1.0.0-1.2.0.md", "fifo", (), "tinypkg-1.0.0-1.2.0.md there is a FIFO"),
         ("--html", "html/index.html", "dir", ("--html", "{tmp}/html"), "index.html there is a directory"),
         ("--html", "html/index.html", "link", ("--html", "{tmp}/html"), "index.html there is a symlink"),
         ("--html", "html/index.html", "fifo", ("--html", "{tmp}/html"), "index.html there is a FIFO"),
         ("--html", "html/matrix.md", "dir", ("--html", "{tmp}/html"), "matrix.md there is a directory"),
         ("--html", "html/issues/tinypkg-1.2.0-m.md", "dir", ("--html", "{tmp}/html"), "tinypkg-1.2.0-m.md there is"),
         ("--html", "html/issues", "fifo", ("--html", "{tmp}/html"), "html/issues is not a directory"),
         ("--issues", "out/issues/tinypkg-1.2.0-m.md", "dir", (), "tinypkg-1.2.0-m.md there is a directory"),
         ("--issues", "drafts/tinypkg-1.2.0-m.md", "link", ("--issues", "{tmp}/drafts"), "there is a symlink")]
KINDS = [Kind("destinations", f"{flag}: {rel.split('/', 1)[1]} is a {what}" + (" (named)" if extra and flag == "--issues"
                                                                                 else ""),
              _matrix(*extra), 2, said, files={"m.toml": MATRIX_TOML}, setup=_planted(rel, what))
         for flag, rel, what, extra, said in CASES]
BATTERY = [k.id for k in KINDS]   # counted by tests/process/test_hostile.py


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_a_destination_that_is_no_regular_file_is_refused_before_any_work(kind, world, tmp_path, monkeypatch, capsys):
    battery.run_kind(kind, world, tmp_path, monkeypatch, capsys)
    victim = tmp_path / "kind" / "victim"
    assert not victim.exists() or victim.read_text() == "keep\n"
