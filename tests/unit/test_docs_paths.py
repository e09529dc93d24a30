"""The docs name only what exists: every repository file or folder README.md, docs/*.md and probes/README.md
name (a path under one of the tree's top folders, or a relative link) is in the tree, every flag of a
`bisector SUBCOMMAND ...` they show is in that subcommand's parser, and no sample output carries another
machine's scratch paths (a session's /tmp/iNN/..., /root/...)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "probes" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOPS = "bisector|probes|bench|docs|tests|examples|envs|\\.ci"
EXT = r"\.(?:py|md|toml|ya?ml|json|sh|txt|html|cfg|whl|tgz)"
# a path under a top folder: a file with an extension, or a folder (with its slash); placeholders such
# as probes/<name>.py or probes/NAME are not paths
PATH = re.compile(rf"(?<![\w./~<>$-])((?:{TOPS})/(?:[\w.-]+/)*(?:[\w-]+(?:\.[\w-]+)*{EXT}|[\w.-]+/))(?![\w<>])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MACHINE = re.compile(r"/tmp/i\d+[\w-]*/|/root/|/uvtools/")


COMMAND = re.compile(r"bisector ([a-z]+(?: [a-z]+)?)((?: +(?:'[^']*'|\"[^\"]*\"|[^\s`|;&)]+))*)")
FLAG = re.compile(r"(?<![\w=-])(--[a-z][\w-]*)")   # --probe-arg=--loop=x: --loop is the probe's, not ours


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def unknown_flags(text: str) -> list[str]:
    """'bisector run --no-such' for each flag of a shown command its subcommand does not take."""
    from bisector.cli.args import build_parser
    commands = _subparsers(build_parser())
    out = []
    for m in COMMAND.finditer(text.replace("\\\n", " ")):
        words = m[1].split()
        parser = commands.get(words[0])
        if parser is None:
            continue   # prose ("bisector builds ...")
        inner = _subparsers(parser).get(words[1]) if len(words) > 1 else None
        known = {o for p in (parser, inner) if p is not None for a in p._actions for o in a.option_strings}
        out += [f"bisector {words[0]} {flag}" for flag in FLAG.findall(m[2].split(" -- ")[0]) if flag not in known]
    return out


def named_paths(text: str) -> list[str]:
    return [m[1] for m in PATH.finditer(text)]


def missing(doc: Path) -> list[str]:
    text = doc.read_text()
    gone = [p for p in named_paths(text) if not (ROOT / p).exists() and not (doc.parent / p).exists()]
    gone += [p for p in LINK.findall(text) if "://" not in p and not p.startswith("mailto:")
             and not (doc.parent / p).exists()]
    return gone


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc):
    assert missing(doc) == [], f"{doc.relative_to(ROOT)} names paths that are not in the tree"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_flag_a_doc_shows_is_in_the_commands_help(doc):
    assert unknown_flags(doc.read_text()) == [], f"{doc.relative_to(ROOT)} shows flags bisector does not take"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_no_sample_carries_another_machines_paths(doc):
    found = [line.strip() for line in doc.read_text().splitlines() if MACHINE.search(line)]
    assert found == [], f"{doc.relative_to(ROOT)}: {found[:3]}"


def test_the_check_finds_what_is_gone(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see bench/gpu_check.py, `probes/_meters/`, [a](nowhere.md#x), docs/install.md, "
                   "probes/<name>.py, probes/NAME and [b](https://example.com/a.md)\n")
    assert missing(doc) == ["bench/gpu_check.py", "probes/_meters/", "nowhere.md"]
    assert MACHINE.search("torch: 2.13.0 from /tmp/i24-routes/uvtools/bisector/bin/python")
    assert unknown_flags("`bisector run --good 1 --probe-arg=--loop=x --no-such-flag -- python t.py --lr 1` and "
                         "`bisector envs list --keep-last 1`; bisector builds --everything") == \
        ["bisector run --no-such-flag", "bisector envs --keep-last"]
