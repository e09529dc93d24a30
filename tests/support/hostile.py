"""The hostile-input battery's world and its table of kinds (tests/process/test_hostile.py runs them).

A kind is one input a careful user or an attacker might give, with what must come of it: the exit
code and a piece of the one line that says why. Arguments may name the world's fixtures by
placeholder: ``{tmp}`` (the kind's own empty directory), ``{repo}`` (a tinypkg repository of 8
commits, ``{s0}``..``{s7}``), ``{index}`` (a local package index of tinypkg 1.0.0, 1.1.0, 1.2.0 and
tinydep 1.0), ``{spec}`` (an env spec over this interpreter's torch), ``{orphan}`` (a commit with no
history in common), ``{empty}`` (a repository without commits), ``{plain}`` (a directory that is
no repository), ``{file}`` (a plain file).
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tests.support.gitfixture import git, make_repo
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
# planted in the environment of every kind: none of them may appear in any output
SECRET_ENV = {"HF_TOKEN": "hf_" + "Q" * 34, "GITHUB_TOKEN": "ghp_" + "W" * 36,
              "AWS_SECRET_ACCESS_KEY": "aws" + "E" * 37, "MY_SERVICE_API_KEY": "plainsecretvalue42"}
URL_SECRET = "pa55w0rdInUrl"


@dataclass
class World:
    root: Path
    repo: Path
    shas: list[str]
    index: str
    spec: Path
    orphan: str
    empty: Path
    plain: Path
    file: Path

    def fill(self, text: str, tmp: Path) -> str:
        names = {f"s{i}": sha for i, sha in enumerate(self.shas)}
        names.update(tmp=tmp, repo=self.repo, index=self.index, spec=self.spec, orphan=self.orphan,
                     empty=self.empty, plain=self.plain, file=self.file)
        for key, value in names.items():   # (not str.format: TOML has braces of its own)
            text = text.replace("{" + key + "}", str(value))
        return text


def build_world(root: Path, serve) -> World:
    """The repositories, the index (served by ``serve``: LocalIndex.serve's context, entered by the
    caller) and the spec every kind may name."""
    repo, shas = make_repo(root, commits=8, bad_at=5, tags={0: "v0.1.0", 7: "v0.1.7"})
    git(repo, "checkout", "-q", "--orphan", "island")
    (repo / "ISLAND.txt").write_text("no history in common\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "An island")
    orphan = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    empty = root / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    plain, file = root / "plain", root / "a-file.txt"
    plain.mkdir()
    file.write_text("not a repository\n")
    spec = root / "plain.toml"
    spec.write_text('name = "plain"\nbase = "current"\n')
    return World(root, repo, shas, serve, spec, orphan, empty, plain, file)


def local_index(root: Path) -> LocalIndex:
    idx = LocalIndex(root / "idx")
    for i, version in enumerate(("1.0.0", "1.1.0", "1.2.0")):
        idx.add(build_wheel(root / "wheels", "tinypkg", version), T0 + dt.timedelta(days=i))
    idx.add(build_wheel(root / "wheels", "tinydep", "1.0"), T0)
    return idx


@dataclass
class Kind:
    """One hostile input: its class, name, arguments, the exit code and a piece of the one line it must give;
    ``files`` are written into the kind's directory first, ``env`` set, ``setup`` run (with the directory)."""

    klass: str
    name: str
    argv: list[str]
    code: int = 2
    message: str = ""
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    setup: Optional[Callable[[Path, World], None]] = None

    @property
    def id(self) -> str:
        return f"{self.klass}: {self.name}"


COMMITS = {"--package": "tinypkg", "--mode": "commits", "--repo": "{repo}", "--good": "{s0}", "--bad": "{s7}",
           "--env": "{spec}", "--probe-cmd": "true", "--store": "{tmp}/s.db", "--cache-dir": "{tmp}/cache",
           "--no-prefetch": None}
RELEASES = {"--package": "tinypkg", "--mode": "releases", "--good": "1.0", "--bad": "1.2", "--index-url": "{index}",
            "--env": "{spec}", "--probe-cmd": "true", "--store": "{tmp}/s.db", "--cache-dir": "{tmp}/cache"}


def args(base: dict, *extra: str, **changes) -> list[str]:
    """``run`` with ``base``'s flags, ``changes`` (flag_name=value, None drops it) and ``extra`` words after."""
    flags = dict(base)
    for key, value in changes.items():
        flag = "--" + key.rstrip("_").replace("_", "-")
        if value is None:
            flags.pop(flag, None)
        else:
            flags[flag] = value
    out = ["run"]
    for flag, value in flags.items():
        out += [flag] if value is None else [flag, value]
    return out + list(extra)


def commits(*extra: str, **changes) -> list[str]:
    return args(COMMITS, *extra, **changes)


def releases(*extra: str, **changes) -> list[str]:
    return args(RELEASES, *extra, **changes)


def toml(text: str, *extra: str) -> list[str]:
    """A job file kind: ``text`` as {tmp}/bisect.toml over a valid release job."""
    return ["run", "--config", "{tmp}/bisect.toml", "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache", *extra]


JOB_TOML = ('[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "1.2"\nmode = "releases"\nindex_url = "{index}"\n'
            'env = "{spec}"\n')


def config_kind(name: str, body: str, message: str, job: str = JOB_TOML, probe: str = '[probe]\ncmd = "true"\n') -> Kind:
    return Kind("config", name, toml(""), 2, message, files={"bisect.toml": job + probe + body})


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) child processes of ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != b"Z":
            found.append(int(name))
    return found


def processes_with(marker: str) -> list[str]:
    """The ``ps`` lines of every process whose command line holds ``marker``."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line]
