"""The docs name only what exists: every repository file or folder README.md, docs/*.md and probes/README.md
name (a path under one of the tree's top folders, or a relative link) is in the tree, every `bisector WORD` in
code (a code span or block) names a subcommand, every flag of a `bisector SUBCOMMAND ...` they show is in
that subcommand's parser, every other flag they name (in prose too) is bisector's, a probe's, a bench
script's or another tool's named in FOREIGN, and no machine path (/tmp/..., a home directory, /root/,
/opt/...) appears in them."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "probes" / "README.md", ROOT / "probes" / "CONTRACT.md",
        *sorted((ROOT / "docs").glob("*.md"))]
TOPS = "bisector|probes|bench|docs|tests|examples|envs|\\.ci"
EXT = r"\.(?:py|md|toml|ya?ml|json|sh|txt|html|cfg|whl|tgz)"
# a path under a top folder: a file with an extension, or a folder (with its slash); placeholders such
# as probes/<name>.py or probes/NAME are not paths
PATH = re.compile(rf"(?<![\w./~<>$-])((?:{TOPS})/(?:[\w.-]+/)*(?:[\w-]+(?:\.[\w-]+)*{EXT}|[\w.-]+/))(?![\w<>])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MACHINE = re.compile(r"(?<![\w.~-])/(?:tmp/[\w.-]+|home/[\w.-]+/|Users/[\w.-]+/|root/|opt/[\w.-]+/|work/|var/folders/)"
                     r"|/uvtools/")
# a line that shows the redaction of a home directory (docs/reliability.md) names one on purpose
REDACTION_EXAMPLE = re.compile(r"`/home/\w+/[\w/]+` → `~/")
# flags of other tools the docs name, by tool (each checked to be that tool's in its own --help)
FOREIGN = {
    "uv": {"--index", "--index-strategy", "--find-links", "--exclude-newer", "--wheel", "--no-project", "--with",
           "--python", "--reinstall", "--editable", "--default-index", "--prerelease"},
    "pip, pipx": {"--index-url", "--extra-index-url", "--find-links", "--no-deps", "--pip-args", "--pre"},
    "git clone, git rev-list (a partial clone of torch's repository, its commits counted)": {"--bare", "--filter",
                                                                                           "--count"},
    "python -m venv": {"--system-site-packages", "--without-pip"},
    "ray start": {"--head", "--port", "--address"},
    "torchrun": {"--nproc_per_node"},
    "pytest (the README's test command)": {"--dist"},
    "a training program's own (the output flags whose values a measurement's key leaves out)": {
        "--output_dir", "--logging_dir", "--save_path", "--cache_dir", "--checkpoint", "--out"},
    "nvidia-smi": {"--query-gpu"},
    "chromium (the history page's screenshot)": {"--disable-background-networking", "--disable-component-update",
                                                 "--disable-sync", "--no-first-run", "--no-sandbox", "--disable-gpu",
                                                 "--user-data-dir"},
    "a secret's name in a command line (redaction)": {"--hf-token", "--hub-token", "--hub_token", "--wandb_key",
                                                      "--wandb-key", "--db_passwd", "--client-secret", "--basic_auth",
                                                      "--aws-credentials", "--tokenizer", "--monkey", "--password"},
}


COMMAND = re.compile(r"bisector ([a-z]+(?: [a-z]+)?)((?: +(?:'[^']*'|\"[^\"]*\"|[^\s`|;&)]+))*)")
FLAG = re.compile(r"(?<![\w=-])(--[a-z][\w-]*)")   # --probe-arg=--loop=x: --loop is the probe's, not ours


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)


def _code(text: str) -> str:
    """The code in a markdown text: its fenced blocks and code spans, one per line."""
    return "\n".join(m[1] or m[2] for m in CODE.finditer(text))


def unknown_commands(text: str) -> list[str]:
    """'bisector frobnicate' for each `bisector WORD` in code whose WORD is no subcommand (prose such as
    "bisector builds ..." outside code is not a command)."""
    from bisector.cli.subcommands import build_parser
    commands = _subparsers(build_parser())
    return [f"bisector {m[1]}" for m in re.finditer(r"(?:^|[\s`($])bisector ([a-z][a-z-]*)\b(?![:'])",
                                                     _code(text).replace("\\\n", " "), re.M)
            if m[1] not in commands]


def all_flags() -> set[str]:
    """Every flag of bisector (any subcommand), of the probes and of the bench scripts (their argparse),
    the ``--no-X`` of each, and FOREIGN's."""
    from bisector.cli.subcommands import build_parser
    known: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            known.update(action.option_strings)
        for sub in _subparsers(parser).values():
            walk(sub)
    walk(build_parser())
    for folder in ("probes", "bench", "acceptance"):
        for path in (ROOT / folder).rglob("*.py"):
            known.update(re.findall(r"add_argument\(\s*\"(--[a-z][\w-]*)\"", path.read_text()))
    known |= {"--no-" + f.removeprefix("--") for f in known}
    return known | set().union(*FOREIGN.values())


def unknown_prose_flags(text: str, known: set[str]) -> list[str]:
    """Each flag the text names anywhere (prose included) that nothing here takes."""
    return sorted({f for f in FLAG.findall(text) if f not in known})


def unknown_flags(text: str) -> list[str]:
    """'bisector run --no-such' for each flag of a shown command its subcommand does not take."""
    from bisector.cli.subcommands import build_parser
    commands = _subparsers(build_parser())
    out = []
    for m in COMMAND.finditer(text.replace("\\\n", " ")):
        words = m[1].split()
        parser = commands.get(words[0])
        if parser is None:
            continue   # prose ("bisector builds ..."); in code, unknown_commands names it
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
def test_every_command_a_doc_shows_is_a_subcommand(doc):
    assert unknown_commands(doc.read_text()) == [], f"{doc.relative_to(ROOT)} shows commands bisector does not have"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_flag_a_doc_names_is_taken_by_something(doc):
    assert unknown_prose_flags(doc.read_text(), all_flags()) == [], f"{doc.relative_to(ROOT)} names unknown flags"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_no_doc_carries_a_machine_path(doc):
    found = [line.strip() for line in doc.read_text().splitlines()
             if MACHINE.search(line) and not REDACTION_EXAMPLE.search(line)]
    assert found == [], f"{doc.relative_to(ROOT)}: {found[:3]}"


def test_the_check_finds_what_is_gone(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see bench/gpu_check.py, `probes/_gauges/`, [a](nowhere.md#x), docs/install.md, "
                   "probes/<name>.py, probes/NAME and [b](https://example.com/a.md)\n")
    assert missing(doc) == ["bench/gpu_check.py", "probes/_gauges/", "nowhere.md"]
    assert MACHINE.search("torch: 2.13.0 from /tmp/i24-routes/uvtools/bisector/bin/python")
    for path in ("/home/alice/src/x", "/tmp/session/out.json", "/root/.cache", "/opt/wheels/torch.whl",
                 "/Users/bob/x", "OUT=/tmp/gf bash"):
        assert MACHINE.search(path), path
    for fine in ("~/src/accelerate", "`reports/<run>.md`", "https://example.com/tmp/x", "/etc/pip.conf"):
        assert not MACHINE.search(fine), fine
    assert unknown_commands("`bisector frobnicate --x` and\n```\n$ bisector run --good 1\nbisector: error: x\n```\n"
                            "bisector builds an environment") == ["bisector frobnicate"]
    assert unknown_prose_flags("with --widen, or --no-such-flag, or --no-warm (pip's --index-url)", all_flags()) == \
        ["--no-such-flag"]
    assert unknown_flags("`bisector run --good 1 --probe-arg=--loop=x --no-such-flag -- python t.py --lr 1` and "
                         "`bisector envs list --keep-last 1`; bisector builds --everything") == \
        ["bisector run --no-such-flag", "bisector envs --keep-last"]
