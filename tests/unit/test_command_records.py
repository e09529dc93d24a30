"""The command meter's record files (probes/command/_records.py): written only where the meter owns, read only
when signed with the run's key; everything else is reported, never summed."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "probes" / "command"))
from _records import RecordFile, encode, mac, read_records  # noqa: E402

KEY = bytes(range(16))


def test_signed_lines_are_read_and_everything_else_is_rejected_with_its_reason(tmp_path):
    good = encode(KEY, {"kind": "step", "i": 0, "peak_bytes": 10})
    other_key = encode(b"x" * 16, {"kind": "step", "i": 1, "peak_bytes": 7})
    not_object = mac(KEY, b"[1, 2]") + b" [1, 2]\n"
    not_json = mac(KEY, b"{nope") + b" {nope\n"
    (tmp_path / "100.jsonl").write_bytes(good + other_key + b'{"kind": "step", "peak_bytes": 7}\n' + not_object
                                         + not_json + good[:20])
    (tmp_path / "notes.txt").write_text("hello")
    procs, problems, cut = read_records(str(tmp_path), KEY)
    assert procs == {100: [{"kind": "step", "i": 0, "peak_bytes": 10}]} and cut == 1
    assert problems == ["notes.txt: not a record file of the meter",
                        "100.jsonl:2: not signed by the meter (written by something else)",
                        "100.jsonl:3: not signed by the meter (written by something else)",
                        "100.jsonl:4: not a record object", "100.jsonl:5: does not parse"]


def test_a_program_that_closes_the_descriptor_and_reuses_its_number_keeps_its_file(tmp_path):
    (tmp_path / "records").mkdir()
    records = RecordFile(str(tmp_path / "records"), KEY, 4242)
    assert records.open()
    assert records.fd > 100 and not os.get_inheritable(records.fd)   # high and close-on-exec
    records.write({"kind": "step", "i": 0})
    number = records.fd
    os.close(number)
    mine = tmp_path / "mine.txt"
    own = os.open(mine, os.O_WRONLY | os.O_CREAT)
    os.dup2(own, number)   # the program's file behind the meter's old number
    records.write({"kind": "step", "i": 1})
    os.write(number, b"program\n")
    assert mine.read_bytes() == b"program\n"
    procs, problems, _ = read_records(str(tmp_path / "records"), KEY)
    assert problems == [] and sorted(os.listdir(tmp_path / "records")) == ["4242-1.jsonl", "4242.jsonl"]
    assert procs[4242] == [{"kind": "step", "i": 0}, {"kind": "lost", "file": 1, "why": "the program reused the "
                           "meter's record descriptor for a file of its own"}, {"kind": "step", "i": 1}]
    for fd in (own, number, records.fd):
        os.close(fd)


def test_a_removed_record_file_is_never_written_again_and_a_closed_descriptor_is_said(tmp_path):
    records = RecordFile(str(tmp_path), KEY, 7)
    assert records.open()
    os.remove(records.path)
    records.write({"kind": "end"})
    os.close(records.fd)
    records.write({"kind": "end", "again": True})
    procs, _, _ = read_records(str(tmp_path), KEY)
    assert [r.get("why") for r in procs[7]] == ["the meter's record file was removed", None,
                                                 "the program closed the meter's record descriptor", None]
    os.close(records.fd)


def test_a_file_that_is_not_the_meters_own_is_never_opened_for_writing(tmp_path):
    (tmp_path / "9.jsonl").write_text("the program's\n")   # made before the meter: no O_EXCL open of it
    os.symlink(tmp_path / "elsewhere", tmp_path / "10.jsonl")
    assert not RecordFile(str(tmp_path), KEY, 9).open() and not RecordFile(str(tmp_path), KEY, 10).open()
    assert (tmp_path / "9.jsonl").read_text() == "the program's\n" and not (tmp_path / "elsewhere").exists()
    assert json.loads(encode(KEY, {"kind": "x"}).split(b" ", 1)[1]) == {"kind": "x"}
