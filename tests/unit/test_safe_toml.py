"""TOML refused by its shape before tomllib reads it (bisector.safety.safe_toml): what settings files hold reads as
tomllib reads it; a key of many dotted parts (anywhere: a header, a key, inside an inline table), deep nesting and a
number past Python's int-string limit are one TomlShapeError each, at once."""
from __future__ import annotations

import time
import tomllib

import pytest

from bisector.data import specs_dir
from bisector.safety.safe_toml import TomlShapeError, loads, shape_problem

SETTINGS = '''# a job file: dots, digits and brackets inside strings and comments count for nothing
[job]
package = "accelerate"   # e.g. 0.27.2 . . . . [[[[ {{{{
good = "0.27.0"
url = "https://example.com/a.b.c.d.e.f"
[probe]
args = ["--loop=accelerate", "1.0.0", '[[[[', "{{{{", """multi
line . . . [[[ {{{ with \\""" inside""", \'\'\'raw . [[[ ''\'\'\']
[criterion]
threshold = 1.5e-3
big = 1_000_000_000
when = 1979-05-27T07:32:00.999999Z
[[matrix.axes]]
a.b.c = {x.y = 1, z = [1, [2, [3]]]}
"quoted.key"."other" = 0x_ff
'''


def test_what_settings_files_hold_reads_as_tomllib_reads_it():
    text = SETTINGS.replace("0x_ff", "0xff")
    assert shape_problem(text) is None and loads(text) == tomllib.loads(text)
    for spec in specs_dir().glob("*.toml"):
        assert loads(spec.read_text()) == tomllib.loads(spec.read_text())


@pytest.mark.parametrize("text,said", [
    ("a" + ".a" * 100_000 + " = 1\n", "line 1: a key of more than 256 dotted parts"),
    ("[x]\ny = {a" + ".a" * 100_000 + " = 1}\n", "line 2: a key of more than 256 dotted parts"),
    ("[a" + ".a" * 100_000 + "]\n", "a key of more than 256 dotted parts"),
    ('"a"' + '."a"' * 300 + " = 1\n", "a key of more than 256 dotted parts"),
    ("x = " + "[" * 50_000 + "]" * 50_000 + "\n", "nested more than 64 deep"),
    ("x = " + "{a = " * 65 + "1" + "}" * 65 + "\n", "nested more than 64 deep"),
    ("\n\njobs = 1" + "0" * 5000 + "\n", "line 3: a number of more than 100 digits"),
    ("x = 1." + "1" * 5000 + "\n", "a number of more than 100 digits"),
])
def test_a_shape_no_settings_file_has_is_refused_at_once(text, said):
    start = time.process_time()
    with pytest.raises(TomlShapeError, match=said):
        loads(text)
    assert time.process_time() - start < 2.0   # (tomllib: minutes for the dotted keys)
    assert isinstance(TomlShapeError("x"), tomllib.TOMLDecodeError)   # every reader's handler takes it


def test_a_string_of_any_length_and_content_is_no_shape():
    text = 'x = "' + "1" * 5000 + "." * 5000 + "[" * 5000 + '"\n'
    assert loads(text)["x"].startswith("1111")
