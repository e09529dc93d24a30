"""Issue 45: a command run's repro carries the files its command names inside the directory it ran in (text, within
the bound, secrets masked so the program still runs, each with the sha256 of what the script writes) and says,
with why, what it cannot carry: a directory, a data file, a file over the bound, a path outside the directory."""
from __future__ import annotations

import ast
import base64
import hashlib

from bisector.repro.carry import FILE_MAX, carried_settings, carry, header_lines
from bisector.repro.source_mask import masked

TRAIN = '''import json, sys
import torch
HF_TOKEN = "hf_abcdefghijklmnopqrstuvwx"   # token: hf_abcdefghijklmnopqrstuvwxyz
password = "hunter2hunter2"
tokenizer = type("T", (), {"eos_token": "</s>"})()
tokenizer.pad_token = tokenizer.eos_token
print(json.load(open(sys.argv[2]))["scale"], tokenizer.pad_token)
'''


def test_the_files_the_command_names_are_carried_and_the_rest_said(tmp_path):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "train.py").write_text(TRAIN)
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "conf.json").write_text('{"scale": 2, "api_key": "abcdef123456"}\n')
    (work / "weights.bin").write_bytes(b"\x00\x01\x02" * 10)
    (work / "big.txt").write_text("x" * (FILE_MAX + 5000))
    (tmp_path / "outside.txt").write_text("o\n")
    (work / "link.py").symlink_to(tmp_path / "outside.txt")
    words = ["python", "train.py", "--config", "conf.json", "--init=weights.bin", "./run.sh", "data/", "big.txt",
             "../outside.txt", str(tmp_path / "outside.txt"), "link.py", "out/", "-c", "import torch\nprint(1)",
             "./train.py"]
    c = carry(words, work)
    assert [(f.rel, f.mode, f.masked) for f in c.files] == [("train.py", 0o644, True), ("conf.json", 0o644, True),
                                                           ("run.sh", 0o755, False)]
    assert c.left_out == ["weights.bin (a data file, not text (30 B))", "data/ (a directory)",
                          "big.txt (260.88 KiB, over the 256.00 KiB the repro carries)",
                          "../outside.txt (outside the directory the command ran in: give it at the same path)",
                          f"{tmp_path / 'outside.txt'} (outside the directory the command ran in: give it at the same path)",
                          "link.py (a link out of the directory the command ran in: give it at the same path)"]
    train = c.files[0].text
    assert "hf_abcdefghij" not in train and "hunter2" not in train and 'password = "***"' in train
    assert "tokenizer.pad_token = tokenizer.eos_token" in train and ast.parse(train)   # masked, still the program
    assert '"api_key": "***"' in c.files[1].text and c.files[2].text == "#!/bin/sh\necho hi\n"
    # the script's settings: each file reads back as the bytes its sha256 names
    namespace: dict = {"base64": base64}
    exec("\n".join(carried_settings(c)), namespace)   # noqa: S102 - how the script holds them
    for f in c.files:
        entry = namespace["CARRIED"][f.rel]
        assert entry["source"] == f.text and hashlib.sha256(entry["source"].encode()).hexdigest() == entry["sha256"]
        assert entry["mode"] == f.mode
    assert namespace["NOT_CARRIED"] == c.left_out
    said = " ".join(header_lines(c, "repro.py"))
    assert f"train.py (" in said and c.files[0].sha256 in said and "Secrets in train.py, conf.json are masked" in said
    assert "Not carried (put each there by hand" in said and "data/ (a directory)" in said
    assert carry(words, None).files == [] and carry(["python", "x.py"], work).left_out == []   # (nothing named there)


def test_the_bound_holds_for_all_files_together(tmp_path):
    for i in range(6):
        (tmp_path / f"c{i}.txt").write_text("y" * (FILE_MAX - 10))
    c = carry([f"c{i}.txt" for i in range(6)], tmp_path)
    assert [f.rel for f in c.files] == ["c0.txt", "c1.txt", "c2.txt", "c3.txt"] and len(c.left_out) == 2
    assert all("over the 1.00 MiB the repro carries" in x for x in c.left_out)


def test_python_is_masked_only_where_a_secret_can_be_and_must_still_parse():
    assert masked("x.pad_token = y.eos_token\nkey = 'sk'\n", python=True) == "x.pad_token = y.eos_token\nkey = 'sk'\n"
    assert masked("x.pad_token = y.eos_token\n", python=False) == "x.pad_token = ***\n"   # (as text: masked)
    assert masked('h = {"Authorization": "Bearer abcdefgh"}  # password: hunter22\n', python=True) == \
        'h = {"Authorization": "Bearer ***"}  # password: ***\n'
    # masking that would leave no Python (a key's start without its end eats the quote): not carried at all
    assert masked('KEY = "-----BEGIN RSA PRIVATE KEY-----abc"\n', python=True) is None
    assert masked("def f(:\n  'token: abcdefgh'\n", python=True) == "def f(:\n  'token: ***'\n"   # not Python: as found
