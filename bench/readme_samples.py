"""Regenerate every marked sample output in README.md and docs/*.md from a real run of its command.

Run as ``python bench/readme_samples.py --accelerate CLONE [--only WORD] [--cache DIR]`` (CLONE: a local git
clone of accelerate; the docs show it as ``~/src/accelerate``). A sample block is the fenced block right
below a marker line::

    <!-- sample: bisector run --package accelerate --good 0.27 --bad 0.28; part: 1-6 & /^First bad/ -->

``sample:`` is the command exactly as the doc shows it (the block's own ``$ ...`` first line, or in
backticks in the paragraph above; tests/unit/test_samples.py checks both). Optional keys, each after
``;``:

* ``after: CMD && CMD``: commands run first, in the same store and directory (a bisect before its
  ``bisector report``);
* ``files: PATH`` (repository paths, copied into the directory it runs in) or ``files: toml above`` (the
  nearest ```toml block above the marker, as bisect.toml);
* ``part: ITEM & ITEM ...``: which lines of the output the block keeps, ``...`` where lines are left out:
  ``N-M`` / ``N-`` (1-based), ``/RE/`` (the first line matching RE from where the previous item ended, and
  the lines indented deeper below it: a wrapped line), ``/RE/+K`` (and K lines more), ``A..B`` (from A
  through B, each a line number or a /RE/);
* ``file: NAME``: the block is that file as the command wrote it, not its output;
* ``log``: keep the lines a terminal shows only in its live status line (builds, probe heartbeats);
* ``stdout``: the command's standard output alone (a report to paste), not its notes on stderr.

Each command runs once per regeneration (blocks with the same command and ``after`` share its output), as
``python -m bisector`` of this tree, in a directory of its own, with a fresh store and a shared environment
cache; stdout and stderr as a log gets them. The blocks are rewritten in place; nothing else in a doc is.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- sample: (?P<body>.*?) -->$")
CLONE_SHOWN = "~/src/accelerate"
LIVE = re.compile(r"^  (building the environment of .*|probing .*: \d+ s.*|\S.* \.\.\.|\S.*: (done|failed) after \d+s)$")


@dataclass
class Sample:
    doc: Path
    line: int                      # the marker's line index
    command: str
    after: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    part: Optional[str] = None
    file: Optional[str] = None
    log: bool = False
    stdout: bool = False
    start: int = 0                 # the block's first content line index (after the fence)
    end: int = 0                   # the closing fence's index


def parse_marker(body: str) -> dict:
    """The marker's fields: command, after, files, part, file, log."""
    command, *rest = [p.strip() for p in body.split("; ")]
    out: dict = {"command": command, "after": [], "files": [], "part": None, "file": None, "log": False,
                 "stdout": False}
    for item in rest:
        key, _, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if key == "after":
            out["after"] = [c.strip() for c in value.split(" && ")]
        elif key == "files":
            out["files"] = [f.strip() for f in value.split(",")]
        elif key in ("part", "file"):
            out[key] = value
        elif key in ("log", "stdout"):
            out[key] = True
        else:
            raise ValueError(f"unknown sample key {key!r}")
    return out


def samples(doc: Path) -> list[Sample]:
    """The marked blocks of one doc."""
    lines, out = doc.read_text().splitlines(), []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"{doc.name}:{i + 1}: a sample marker must stand right above a fenced block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        out.append(Sample(doc, i, start=i + 2, end=end, **parse_marker(m["body"])))
    return out


def toml_above(doc: Path, line: int) -> str:
    lines = doc.read_text().splitlines()
    opens = [i for i in range(line) if lines[i].startswith("```toml")]
    if not opens:
        raise ValueError(f"{doc.name}:{line + 1}: 'files: toml above' but no ```toml block above")
    end = next(j for j in range(opens[-1] + 1, len(lines)) if lines[j].startswith("```"))
    return "\n".join(lines[opens[-1] + 1:end]) + "\n"


# -- choosing lines ---------------------------------------------------------------------------------
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _find(out: list[str], ref: str, start: int) -> int:
    if ref.startswith("/"):
        rx = re.compile(ref.strip("/"))
        for i in range(start, len(out)):
            if rx.search(out[i]):
                return i
        raise ValueError(f"no output line matches {ref} (from line {start + 1})")
    return int(ref) - 1


def select(out: list[str], part: Optional[str]) -> list[str]:
    """The lines ``part`` keeps, with '...' (indented as the next kept line) where lines are left out; a
    last item ``...`` says that more follows."""
    if not part:
        return out
    items = [p.strip() for p in part.split(" & ")]
    more = items[-1] == "..."
    chosen: list[int] = []
    pos = 0
    for item in items[:-1] if more else items:
        if m := re.match(r"^(\d+|/.+?/)\.\.(\d+|/.+/)$", item):
            lo = _find(out, m[1], pos)
            idx = list(range(lo, _find(out, m[2], lo) + 1))
        elif m := re.match(r"^(\d+)-(\d*)$", item):
            idx = list(range(int(m[1]) - 1, int(m[2]) if m[2] else len(out)))
        elif m := re.match(r"^(/.+/)(?:\+(\d+))?$", item):
            lo = hi = _find(out, m[1], pos)
            while hi + 1 < len(out) and out[hi + 1].strip() and _indent(out[hi + 1]) > _indent(out[lo]):
                hi += 1
            idx = list(range(lo, min(hi + int(m[2] or 0), len(out) - 1) + 1))
        else:
            raise ValueError(f"bad part item {item!r}")
        chosen += [i for i in idx if i not in chosen]
        pos = idx[-1] + 1 if idx else pos
    kept: list[str] = []
    prev: Optional[int] = None
    for i in sorted(chosen):
        if (prev is None and i > 0) or (prev is not None and i != prev + 1):
            kept.append(" " * _indent(out[i]) + "...")
        kept.append(out[i])
        prev = i
    return kept + (["..."] if more else [])


# -- running ----------------------------------------------------------------------------------------
class Runner:
    """Runs the commands in sessions: a session is a directory and a store of its own (the environment
    cache is shared), keyed by the files laid into it and its first command; each command runs once in
    its session, in the order the samples ask (a sample's ``after`` first). With the ``--work`` of an
    earlier regeneration, the outputs recorded there are taken again (a changed ``part`` re-renders
    without a new run)."""

    def __init__(self, clone: Path, cache: Path, work: Path):
        self.clone, self.cache, self.work = clone, cache, work
        self.saved = work / "outputs.json"
        self.sessions: dict[str, dict] = json.loads(self.saved.read_text()) if self.saved.is_file() else {}

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command.replace(CLONE_SHOWN, shlex.quote(str(self.clone))))
        assert words[0] == "bisector", command
        return [sys.executable, "-m", "bisector", *words[1:]]

    def run(self, command: str, cwd: Path, stdout_only: bool = False) -> str:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BISECTOR_CACHE_DIR": str(self.cache),
               "BISECTOR_STORE": str(cwd.parent / (cwd.name + ".sqlite")), "COLUMNS": "100", "NO_COLOR": "1"}
        print(f"  $ {command}", file=sys.stderr, flush=True)
        done = subprocess.run(self.argv(command), cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL if stdout_only else subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, timeout=3600)
        print(f"    exit {done.returncode}, {len(done.stdout.splitlines())} lines", file=sys.stderr, flush=True)
        return done.stdout

    def output(self, s: Sample) -> tuple[str, Path]:
        chain = [*s.after, s.command]
        key = json.dumps([s.files, chain[0]])
        session = self.sessions.get(key)
        if session is None:
            cwd = Path(tempfile.mkdtemp(prefix="sample-", dir=self.work))
            for f in s.files:
                if f == "toml above":
                    (cwd / "bisect.toml").write_text(toml_above(s.doc, s.line))
                else:
                    shutil.copy(ROOT / f, cwd / Path(f).name)
            session = self.sessions[key] = {"cwd": str(cwd), "outputs": {}}
        for command in chain:
            if command not in session["outputs"]:
                session["outputs"][command] = self.run(command, Path(session["cwd"]))
                self.saved.write_text(json.dumps(self.sessions, indent=1))
        if s.stdout:   # the same command again, its standard output alone (a report reads the store: the same)
            key = s.command + " [stdout]"
            if key not in session["outputs"]:
                session["outputs"][key] = self.run(s.command, Path(session["cwd"]), stdout_only=True)
                self.saved.write_text(json.dumps(self.sessions, indent=1))
            return session["outputs"][key], Path(session["cwd"])
        return session["outputs"][s.command], Path(session["cwd"])


def render(s: Sample, text: str, cwd: Path, old: list[str]) -> list[str]:
    if s.file:
        lines = (cwd / s.file).read_text().splitlines()
    else:
        lines = [line.rstrip() for line in text.splitlines()]
        if not s.log:
            lines = [line for line in lines if not LIVE.match(line)]
    body = select(lines, s.part)
    shows_command = bool(old) and old[0].startswith("$ ")
    return ([f"$ {s.command}"] if shows_command else []) + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accelerate", type=Path, required=True, help="a local git clone of accelerate")
    ap.add_argument("--cache", type=Path, help="the environment cache to share between runs (default: a new one)")
    ap.add_argument("--only", help="regenerate only the blocks whose command contains this")
    ap.add_argument("--work", type=Path, help="where the runs happen and their outputs are kept (default: a new "
                    "directory); given again, the outputs recorded there are reused")
    args = ap.parse_args()
    work = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="bisector-samples-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(args.accelerate.resolve(), (args.cache or work / "cache").resolve(), work)
    for doc in DOCS:
        found = [s for s in samples(doc) if not args.only or args.only in s.command or
                 any(args.only in a for a in s.after)]
        if not found:
            continue
        lines = doc.read_text().splitlines()
        for s in reversed(found):   # bottom up: earlier indexes stay valid
            text, cwd = runner.output(s)
            lines[s.start:s.end] = render(s, text, cwd, lines[s.start:s.end])
        doc.write_text("\n".join(lines) + "\n")
        print(f"rewrote {len(found)} block(s) in {doc.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
