"""The header of a repro script (``bisector report --repro FILE``): what a maintainer reads and runs to
make the bisect's two environments and run the script in each, with no bisector.

Its install lines are commands, one a line, each marked ``# $ `` and runnable in bash exactly as
printed once that mark is stripped (``sed -n 's/^# [$] //p' FILE | bash`` runs them all): per side a
``python3 -m venv`` and one ``pip install`` that names the index the bisect installed from (its
installers' configuration: ``--index-url`` / ``--extra-index-url``, credentials redacted, never a
host of bisector's choosing) and pins *every* package the side's environment held, exactly (so the
maintainer's environment is the bisect's: torch at its release, the package under test at its
version or commit, every companion and dependency at its version). Only installable requirements:
a fact of the run (where torch came from, its local build tag) is a comment. A commit is a ``git+``
URL that pip takes (``.git`` once; an scp-style ``git@host:o/x`` as ``ssh://``); a local clone is
``$REPO_URL``, which the header explains. No path of this machine: the bisect's own command has
``<PATH>`` where it named one. bisector verifies the script by running these very lines
(bisector.repro.fresh_venvs).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from bisector.bisection.boundary import STACK
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult, made_by
from bisector.core.points import Point
from bisector.envs import HEAVY
from bisector.errors import UsageError
from bisector.job.commandline import portable_words
from bisector.report.culprit_lines import full_headline
from bisector.report.env_labels import held
from bisector.report.sides import shown
from bisector.safety.safe_text import one_line
from bisector.sources import git

NOT_PINNED = ("pip",)   # the installer itself: a fresh venv has its own
PACKAGE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")   # PEP 508
CLONE = "${REPO_URL}"   # a local clone in the header: the maintainer's URL of it, never this machine's path
INSTALL = "# $ "        # the mark of an install line (stripped, the line runs in bash as it is)
VENVS = {"last good": "good", "first bad": "bad"}
PATH_PLACEHOLDER = "<PATH>"
_SCP = re.compile(r"^(?:([\w.-]+)@)?([\w.-]+):(?!//)(.+)$")
_ABS_PATH = re.compile(r"(?<![\w:/.<])(?:~|/)[^\s'\"]*")


@dataclass(frozen=True)
class IndexUse:
    """The index the bisect installed from, as its installers' configuration named it (what the install
    lines pass to pip); ``left_out``: indexes that are paths of this machine (``file://``), not printed."""

    index_url: Optional[str] = None
    extra_index_urls: list[str] = field(default_factory=list)
    left_out: int = 0

    def pip_args(self) -> list[str]:
        args = ["--index-url", self.index_url] if self.index_url else []
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        return args


def index_use(index_url: Optional[str], extra_index_urls: list[str]) -> IndexUse:
    """What the header prints of the bisect's indexes (a ``file://`` index is this machine's: left out)."""
    urls = [u for u in [index_url, *extra_index_urls] if u]
    local = [u for u in urls if not re.match(r"^https?://", u)]
    main = index_url if index_url and index_url not in local else None
    return IndexUse(main, [u for u in extra_index_urls if u not in local], len(local))


def sides(result: BisectResult) -> tuple[BisectResult, Point, Point]:
    """The result whose boundary is reproduced (the followed companion's when it found the step) and its
    last good and first bad; UsageError when there is none, or it predates per-side environments."""
    s = shown(result)
    if s.last_good is None or s.first_bad is None:
        raise UsageError(f"run {result.run_id} has no last good and first bad ({s.status}): nothing to reproduce")
    if not s.last_good.env or not s.first_bad.env:
        raise UsageError(f"run {result.run_id} was stored before reports kept each side's environment: rerun it "
                         f"(bisector run --resume {result.run_id} reuses its measurements), then --repro")
    return s, s.last_good, s.first_bad


def vcs_url(url: str) -> str:
    """``url`` as pip's ``git+`` URL of a repository: ``.git`` added once (never ``x.git.git``); an
    scp-style ``git@host:o/x`` (which pip refuses) as ``ssh://git@host/o/x.git``."""
    url = url.rstrip("/")
    scp = _SCP.match(url) if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", url) else None
    if scp:
        user, host, path = scp.groups()
        url = f"ssh://{user + '@' if user else ''}{host}/{path.lstrip('/')}"
    return url if url.endswith(".git") else f"{url}.git"


def requirement(package: str, p: Point, repo_url: Optional[str], repo: Optional[str]) -> str:
    """How pip names the package under test at point ``p``: a release pin, or the commit as a git URL
    (unnamed: pip 23 refuses ``name @ git+file://...@sha``); a local clone is ``$REPO_URL`` (see
    :func:`uses_clone`), never this machine's path."""
    if p.kind is not CandidateKind.COMMIT:
        return f"{package}=={p.ref}"
    if repo_url:
        source = f"git+{vcs_url(repo_url)}"
    elif repo and not git.is_url(repo):
        source = f"git+{CLONE}"   # (not file://$X: "//$X@" would read as a URL's credentials)
    else:
        source = f"git+{vcs_url(repo or '')}"
    return f"{source}@{p.sha}"


def installable(name: str, version: str) -> Optional[str]:
    """``name==version`` (the local build tag dropped) when both are what pip takes, else None: a fact
    of the environment (``torch from``), not a requirement."""
    release = str(version).split("+", 1)[0].strip()
    if not PACKAGE_NAME.match(name) or not re.fullmatch(r"[0-9A-Za-z.!_-]+", release):
        return None
    try:
        Version(release)
    except InvalidVersion:
        return None
    return f"{name}=={release}"


def _held(p: Point) -> dict[str, str]:
    """Every package of the side's environment, name -> version: its pins, then the packages its facts name."""
    out = {}
    for name, version in p.pins:
        out[canonicalize_name(name)] = version
    for name, version in p.env.installed().items():
        out.setdefault(canonicalize_name(name), str(version))
    return out


def installs(s: BisectResult, p: Point, repo: Optional[str]) -> list[str]:
    """The side's requirements, exactly pinned: torch (its release, without the local build tag), the
    package under test (release or commit) and every other package its environment held (only what pip
    can install: see :func:`installable`); torch, transformers, accelerate first."""
    package = canonicalize_name(s.package)
    out = [requirement(s.package, p, s.repo_url, repo)]
    for name, version in _held(p).items():
        if name != package and name not in NOT_PINNED and installable(name, version):
            out.append(installable(name, version))

    def rank(req: str) -> tuple[int, str]:
        name = req.split("==", 1)[0] if "==" in req else s.package
        return (STACK.index(name) if name in STACK else len(STACK), req)

    return sorted(dict.fromkeys(out), key=rank)


def quoted(req: str) -> str:
    """A requirement as a shell word: ``$REPO_URL`` left for the shell to expand (in double quotes)."""
    return f'"{req}"' if CLONE in req else shlex.quote(req)


def uses_clone(s: BisectResult, repo: Optional[str]) -> bool:
    """The commits come from a local clone (the header's requirements name ``$REPO_URL``)."""
    return any(CLONE in r for p in (s.last_good, s.first_bad) for r in installs(s, p, repo))


def _facts(s: BisectResult, p: Point) -> list[str]:
    """What the environment held that is no requirement (where torch came from, a local build tag), without
    a path."""
    out = []
    for name, value in held(p.env).items():
        if name == s.package:
            continue
        text = one_line(str(value))
        if not installable(name, text):   # where torch came from, its commit: no package name
            out.append(f"{one_line(name)}: " + re.sub(r"\s*\([^()]*[/\\][^()]*\)", "", text))   # "(/usr/bin/x)": no path
        elif "+" in text:
            out.append(f"{one_line(name)} {text}, pinned as its release")
    return out


def portable(words: list[str], repo: Optional[str], repo_url: Optional[str] = None) -> str:
    """The bisect's command with no path of this machine: a local ``--repo`` clone as the repository's URL
    (``repo_url``, what the install lines name) or else ``$REPO_URL``, any other path (``--env``,
    ``--probe``, ``--config``, one inside a probe command) as ``<PATH>``."""
    out, local = [], bool(repo) and not git.is_url(repo)
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=") if word.startswith("--") and "=" in word else ("", "", word)
        after_repo = i and words[i - 1] == "--repo"
        if local and ((after_repo and not git.is_url(word)) or (flag == "--repo" and eq and not git.is_url(value))):
            url = shlex.quote(repo_url) if repo_url else '"$REPO_URL"'
            out.append(f"--repo={url}" if eq else url)
            continue
        value = value if git.is_url(value) else _ABS_PATH.sub(PATH_PLACEHOLDER, value)
        out.append(shlex.quote(f"{flag}{eq}{value}" if eq else value))
    return one_line(" ".join(out))


def wrap(prefix: str, words: list[str], width: int = 100) -> list[str]:
    """Comment lines of prose words (each shown by safe_text.one_line: no control or bidi character of a
    subject or a value lands raw in the script, no newline ends the comment)."""
    lines, line = [], prefix
    for word in map(one_line, words):
        if len(line) + len(word) + 1 > width and line.strip("# "):
            lines.append(line.rstrip())
            line = "#     "
        line += word + " "
    return lines + [line.rstrip()]


def install_lines(s: BisectResult, repo: Optional[str], index: IndexUse) -> list[str]:
    """The install commands, one a line, without their mark (what :data:`INSTALL` marks in the header): per
    side a venv; torch with what it needs (as pip resolves it: the bisect's torch was a base its
    environments were layered over); then every other package of the side at its exact version, without
    resolving (``--no-deps``: the list is the whole environment, and it may hold what torch's metadata
    would refuse, such as an older setuptools, as the bisect's environment did)."""
    out = []
    flags = list(map(shlex.quote, index.pip_args()))
    for label, p in (("last good", s.last_good), ("first bad", s.first_bad)):
        venv = VENVS[label]
        reqs = [quoted(r) for r in installs(s, p, repo)]
        torch = [r for r in reqs if r.startswith(("torch==", "'torch=="))]
        rest = [r for r in reqs if r not in torch]
        nightly = _nightly_flags(s, p)
        if nightly:   # torch and what it pins exactly (a triton build) come from the nightly index, as the day's
            rest = [r for r in rest if not HEAVY.match(canonicalize_name(r.strip("'").split("==", 1)[0]))]
        out.append(f"python3 -m venv {venv}")
        if torch:
            out.append(" ".join([f"{venv}/bin/pip", "install", *(nightly or flags), *torch]))
        if rest:
            out.append(" ".join([f"{venv}/bin/pip", "install", *flags, "--no-deps", *rest]))
    return out


def _nightly_flags(s: BisectResult, p: Point) -> list[str]:
    """A torch nightly installs from the nightly index the bisect read, as the pre-release it is (pip's
    words; none for any other side)."""
    url = s.commit_range.index_url if s.commit_range else None
    if p.kind is not CandidateKind.NIGHTLY or not url:
        return []
    return ["--pre", "--index-url", shlex.quote(url)]


def _word(text: Optional[str]) -> str:
    """A run id or a version on the header's second line: letters, digits and ``._+-`` only, so that line can
    never read as an encoding declaration (``# coding: ...``), which Python honours on the first two lines."""
    return text if text and re.fullmatch(r"[\w.+-]+", text, re.ASCII) else "?"


def header(result: BisectResult, name: str, expect: str, repo: Optional[str], index: Optional[IndexUse] = None,
           files: Optional[list[str]] = None) -> list[str]:
    """The comment block: the step, each side, what the script carries of the command's files (``files``: prose),
    the index, the install lines, the run lines, what to expect."""
    s, good, bad = sides(result)
    index = index or IndexUse()
    out = [f"# Reproduces bisector run {_word(result.run_id)} (made by bisector "
           f"{_word(result.bisector_version or made_by())}):",
           *wrap("#   ", full_headline(result).split()),
           "# Needs no bisector: make one fresh environment per side with the install lines below, then run",
           "# the script in each.", "#"]
    if files:
        for paragraph in files:
            out += wrap("# ", paragraph.split())
        out.append("#")
    if uses_clone(s, repo):
        out += [*wrap("# REPO_URL: ", f"a repository of {s.package} holding both commits (the bisect used a local "
                      "clone, not named here); set it first: export REPO_URL=file:///path/to/clone".split()), "#"]
    for label, p in (("last good", good), ("first bad", bad)):
        facts = "; ".join(_facts(s, p))
        shown_ref = p.ref if p.kind is CandidateKind.NIGHTLY else p.ref[:12]
        out.append(f"# {label}: {s.package} {one_line(shown_ref)}" + (f" ({facts})" if facts else ""))
    where = index.index_url or "pip's own configuration (none named)"
    extra = f", with {', '.join(index.extra_index_urls)}" if index.extra_index_urls else ""
    left = f"; {index.left_out} index(es) of the bisect's machine left out" if index.left_out else ""
    out += [*wrap("# ", f"Index: the bisect installed from {where}{extra} (its installers' configuration){left}; "
                  "the install lines name it. They pin every package each side's environment held, exactly: "
                  "torch first, with what it needs; then the rest as the bisect layered it over torch, without "
                  "resolving (--no-deps: the list is the whole environment).".split()), "#",
            "# Install, one command a line (each runs in bash as printed; all of them:",
            f"#   sed -n 's/^# [$] //p' {name} | bash",
            "# ):", *(INSTALL + line for line in install_lines(s, repo, index)),
            "# Run (exit 0: GOOD, 1: BAD):"]
    for venv in VENVS.values():
        out.append(f"#   {venv}/bin/python {name}")
    out.append("# (With uv: `uv venv good` and `uv pip install --python good/bin/python` with the same arguments.)")
    pins = [[str(x) for x in p.pins if canonicalize_name(x.name) != canonicalize_name(s.package)] for p in (good, bad)]
    moved = [f"{x} (last good)" for x in sorted(set(pins[0]) - set(pins[1]))] + [
        f"{x} (first bad)" for x in sorted(set(pins[1]) - set(pins[0]))]
    device = good.env.device
    out += ["#", f"# The bisect ran Python {good.env.python or '?'}" + (f" on {device}" if device else "") + "."]
    out += wrap("#   differing between the sides, besides the package: ", moved) if moved else []
    out += ["#", *wrap("# Expected: ", expect.split())]
    bisect = portable_words(result.command)
    if bisect:
        command = portable(bisect, repo, result.repo_url)
        said = f"; {PATH_PLACEHOLDER}: a path of the bisect's machine, left out" if PATH_PLACEHOLDER in command else ""
        out += [f"# The bisect itself (needs bisector{said}):", f"#   {command}"]
    return [one_line(line) for line in out]   # a value with a newline (a GPU's name, a version) ends no comment
