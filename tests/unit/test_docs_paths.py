"""The docs name only what exists: every repository file or folder README.md, docs/*.md and probes/README.md
name (a path under one of the tree's top folders, or a relative link) is in the tree, and no sample output
carries another machine's scratch paths (a session's /tmp/iNN/..., /root/...)."""
from __future__ import annotations

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
def test_no_sample_carries_another_machines_paths(doc):
    found = [line.strip() for line in doc.read_text().splitlines() if MACHINE.search(line)]
    assert found == [], f"{doc.relative_to(ROOT)}: {found[:3]}"


def test_the_check_finds_what_is_gone(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see bench/gpu_check.py, `probes/_meters/`, [a](nowhere.md#x), docs/install.md, "
                   "probes/<name>.py, probes/NAME and [b](https://example.com/a.md)\n")
    assert missing(doc) == ["bench/gpu_check.py", "probes/_meters/", "nowhere.md"]
    assert MACHINE.search("torch: 2.13.0 from /tmp/i24-routes/uvtools/bisector/bin/python")
