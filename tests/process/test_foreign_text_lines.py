"""Issue 34, "text from others is data", on the error path: a value that holds a terminal escape, a bidi control
or a newline is shown as an escape in the one line bisector refuses it with (the CLI's own errors, argparse's and
a job file's); a value of 100,000 characters is cut to a few dozen in that line. Each kind runs through the hostile
battery's checks (tests/process/test_hostile.py: exit 2, one line, nothing created or stored, no process left, no
secret printed), and then: nothing in the line acts on a terminal, and it stays short."""
from __future__ import annotations

import re

import pytest

from tests.process import test_hostile as battery
from tests.process.test_hostile import world  # noqa: F401 - the battery's world (a fixture)
from tests.support.hostile import Kind, config_kind, releases

ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff]")
LONG = "a" * 100_000

KINDS = [
    Kind("text", "a package name with a title escape", releases(package="tiny\x1b]0;pwn\x07pkg"), 2,
         "tiny\\x1b]0;pwn\\x07pkg"),
    Kind("text", "a good version ending in a right-to-left override", releases(good="1.0\u202e"), 2,
         "'1.0\\u202e' is not a valid version"),
    Kind("text", "a mode that clears the screen (argparse's error)", releases(mode="\x1b[2J\x1b[H"), 2,
         "invalid choice: '\\x1b[2J\\x1b[H'"),
    Kind("text", "a bad version with a newline and a fake line", releases(bad="1.2\nbisector: found it"), 2,
         "1.2\\nbisector: found it"),
    Kind("text", "a C1 CSI and a zero-width space in a --with pin", releases("--with", "tinydep==\x9b2J\u200b"), 2,
         "\\x9b2J\\u200b"),
    config_kind("a job file's package with a bell and an isolate",
                "", "\\x07\\u2066", job='[job]\npackage = "x\\u0007\\u2066y"\ngood = "1.0"\nbad = "1.2"\n'),
    config_kind("a job file's unknown key with an escape", '[run]\n"k\\u001b[31m" = 1\n', "k\\x1b[31m"),
    Kind("long", "a package name of 100,000 characters", releases(package=LONG), 2, "...(100000 chars)"),
    Kind("long", "a --with value of 100,000 characters", releases("--with", "tinydep==" + LONG), 2, "chars)"),
    Kind("long", "a mode of 100,000 characters (argparse's error)", releases(mode=LONG), 2, "...(100002 chars)"),
    Kind("long", "an index URL of 100,000 characters", releases(index_url=LONG), 2, "chars)"),
    Kind("long", "a repeat count of 5001 digits (argparse's error)", releases(repeats="1" * 5001), 2,
         "...(5003 chars)"),
    config_kind("a job file's package of 100,000 characters", "", "...(100000 chars)",
                job=f'[job]\npackage = "{LONG}"\ngood = "1.0"\nbad = "1.2"\n'),
]
BATTERY = [k.id for k in KINDS]   # counted by tests/process/test_hostile.py


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_the_one_line_shows_the_value_as_data(kind: Kind, world, tmp_path, monkeypatch, capsys):
    said = battery.run_kind(kind, world, tmp_path, monkeypatch, capsys)
    assert not ACTING.search(said), ACTING.findall(said)
    assert len(said) < 400, len(said)
