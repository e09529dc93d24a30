"""README's `uv tool install . --with torch==X+cpu --index URL --index-strategy unsafe-best-match` resolves as it
says: torch's CPU build from the named index and everything else from the default one, no CUDA library.
The public CPU index is not reachable here, so the line's index URL is replaced by a local simple index
holding the CPU wheel pip's configuration offers (its find-links); every other word is the README's, and
uv resolves it (`uv pip compile`: the same resolver as `uv tool install`, without installing)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from bisector.envs.builders.torch_size import local_sources
from bisector.sources.installer_config import uv_binary

ROOT = Path(__file__).resolve().parents[2]


def _readme_line() -> list[str]:
    line = next(x for x in (ROOT / "README.md").read_text().splitlines() if x.startswith("uv tool install . "))
    return shlex.split(line)


def test_the_readme_uv_line_takes_the_cpu_torch_from_the_index_it_names(tmp_path):
    words = _readme_line()
    torch = next(w for w in words if w.startswith("torch=="))
    version = torch.removeprefix("torch==")
    assert version.endswith("+cpu") and words[words.index("--index-strategy") + 1] == "unsafe-best-match"
    assert words[words.index("--with") + 1] == torch and "/whl/cpu" in words[words.index("--index") + 1]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    wheels = [p for d in local_sources()[0] for p in d.glob("torch-*.whl")
              if str(parse_wheel_filename(p.name)[1]) == version and tag in p.name]
    if not wheels:
        pytest.skip(f"pip's configuration offers no local torch {version} wheel to stand in for the CPU index")
    page = tmp_path / "simple" / "torch"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(f'<a href="{wheels[0].as_uri()}">{wheels[0].name}</a>\n')
    words[words.index("--index") + 1] = (tmp_path / "simple").as_uri()   # the one word replaced
    (tmp_path / "req.in").write_text(torch + "\n")
    flags = words[words.index("--index"):]
    done = subprocess.run([uv_binary(), "pip", "compile", str(tmp_path / "req.in"), "--python", sys.executable,
                           "--no-header", "--no-annotate", "--quiet", *flags], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    pins = dict(line.split("==", 1) for line in done.stdout.split() if "==" in line)
    assert pins["torch"] == version and not [n for n in pins if re.match(r"(nvidia-|triton|cuda-)", n)], pins
