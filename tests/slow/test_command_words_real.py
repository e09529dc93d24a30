"""Issue 47, items 1 and 2, end to end: ``bisector run ... -- python train.py WORDS`` where the words hold every
secret kind (a ``--password`` value, ``--hub_token hf_...``, ``--wandb_key=...``, a numeric ``--Api-Key``, bare
``sk-``, ``ghp_`` and AWS keys, ``user:password@`` in a URL, ``HF_TOKEN=...``) and every hostile kind (a newline
that would start a forged line, triple quotes, a backslash, ESC, a bidi control). Real environments, a real
loopback index; then ``log``, ``report`` in three formats, ``runs``, ``report --repro``, a matrix with ``--html``
and its issue drafts, ``--resume`` of the stored run. Every file written and the SQL dump of every store are
grepped for each secret; the terminal output has no forged line; the JSON is strict; ``--resume`` asks for the
masked words in BISECTOR_SECRET_<n> in one line, and with them resumes the same job."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pkgindex import LocalIndex, build_wheel

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
TRAIN = """import sys, torch, tinypkg
w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    big = torch.ones(1_000_000 * (1 + tinypkg.X), dtype=torch.uint8)
    loss = (w * 2).sum() + big[:1].float().sum() * 0
    loss.backward(); opt.step(); opt.zero_grad()
"""
FORGED = "  step  9 releases  6.6.6  BAD  FORGED"
SECRETS = {"hunter2x": ["--password", "hunter2x"], "hf_shorty": ["--hub_token", "hf_shorty"],
           "wandbsecret1": ["--wandb_key=wandbsecret1"], "98765432": ["--Api-Key", "98765432"],
           "sk-proj-" + "b" * 30: ["sk-proj-" + "b" * 30], "ghp_" + "C" * 36: ["ghp_" + "C" * 36],
           "AKIA" + "D" * 16: ["AKIA" + "D" * 16], "urlpw77": ["https://bob:urlpw77@example.com/x"],
           "envtok99": ["HF_TOKEN=envtok99"]}
WORDS = ["a\n" + FORGED, '"""', "x\\", "\x1b[2J", "\u202eevil", *[w for ws in SECRETS.values() for w in ws]]
BATTERY = ["secrets: every kind through a real command run: no file, output or SQL dump holds one",   # counted by
           "command words: a real run's terminal output, log and reports forge no line; its JSON is strict",  # test_hostile
           "secrets: --resume of a run stored masked asks for the words in one line and resumes with them"]
JSON_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("words-index")
    idx = LocalIndex(root / "idx")
    for i, version in enumerate(("1.0.0", "1.1.0", "1.2.0")):
        idx.add(build_wheel(root / "w", "tinypkg", version, module_source=f"X = {i}\n"), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def _bisector(*argv, cwd: Path, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "bisector", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {where}"


def _dump(store: Path) -> str:
    return "\n".join(sqlite3.connect(store).iterdump())


def test_a_commands_words_are_data_and_its_secrets_never_leave(index, tmp_path, env_cache, plain_spec):
    (tmp_path / "train.py").write_text(TRAIN)
    store = tmp_path / "s.db"
    where = ["--store", str(store), "--cache-dir", str(env_cache)]
    job = ["--package", "tinypkg", "--mode", "releases", "--good", "1.0.0", "--bad", "1.2.0", "--index-url", index,
           "--env", str(plain_spec), "--max-increase", "50%"]
    run = _bisector("run", *job, *where, "--json", "--", "python", "train.py", *WORDS, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)   # strict: no control character raw in a string
    assert found["first_bad"]["ref"] == "1.1.0" and not JSON_RAW.search(run.stdout.replace("\n", ""))
    said = {"run --json": run.stdout + run.stderr}
    for name, argv in {"log": ["log"], "runs": ["runs"], "report text": ["report", "--format", "text"],
                       "report markdown": ["report"], "report json": ["report", "--format", "json"]}.items():
        done = _bisector(*argv, "--store", str(store), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        said[name] = done.stdout + done.stderr
        assert not any(line.lstrip().startswith("step  9") for line in done.stdout.splitlines()), (name, done.stdout)
    json.loads(said["report json"].split("bisector: run ")[0])
    assert "# command: bisector run" in said["log"] and "$'a\\n  step  9" in said["log"]
    # the repro: written from the stored job, so its words are the masked ones
    repro = _bisector("report", "--repro", str(tmp_path / "repro.py"), *where, cwd=tmp_path)
    said["report --repro"] = repro.stdout + repro.stderr
    # a matrix over the same command: its page, its drafts, its store
    (tmp_path / "m.toml").write_text(f'[matrix]\nenv = "{plain_spec}"\nindex_url = "{index}"\n[matrix.grid]\n'
                                     'tinypkg = ["1.0.0", "1.2.0"]\n[criterion]\nmax_increase = "50%"\n')
    grid = _bisector("matrix", "--config", "m.toml", "--out", "out", "--html", "html", "--store", str(tmp_path / "m.db"),
                     "--cache-dir", str(env_cache), "--", "python", "train.py", *WORDS, cwd=tmp_path)
    assert grid.returncode == 1 and list((tmp_path / "out" / "issues").glob("*.md")), grid.stderr[-3000:]
    said["matrix"] = grid.stdout + grid.stderr
    # --resume from the store: the masked words are asked for, in one line; given back, the same job resumes
    asked = _bisector("run", "--resume", found["run_id"], *where, cwd=tmp_path)
    assert asked.returncode == 2 and asked.stderr.count("\n") == 1 and "BISECTOR_SECRET_9" in asked.stderr, asked.stderr
    given = {f"BISECTOR_SECRET_{i}": w for i, w in enumerate([w for ws in SECRETS.values() for w in ws
                                                               if not w.startswith("--") or "=" in w], 1)}
    resumed = _bisector("run", "--resume", found["run_id"], *where, cwd=tmp_path, env=given)
    assert resumed.returncode == 0 and "measurements reused from the store: 3" in resumed.stdout, resumed.stderr[-2000:]
    said["run --resume"] = resumed.stdout + resumed.stderr
    for name, text in said.items():
        _no_secret(name, text)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "train.py" and not path.name.endswith((".db", "-wal", "-shm")):
            _no_secret(str(path.relative_to(tmp_path)), path.read_bytes().decode("utf-8", "replace"))
    for db in (store, tmp_path / "m.db"):
        _no_secret(f"the SQL dump of {db.name}", _dump(db))
