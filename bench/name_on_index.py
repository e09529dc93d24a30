"""Is a distribution name free on the package index the installers here are configured for?

Run as ``python bench/name_on_index.py [NAME ...]`` (default: pyproject's name). The index comes from the
installers' configuration (bisector.sources.installer_config), never a hard-coded host. Both of the index's
answers are asked: the simple page (``<index>/<name>/``, what pip and uv read) and, for an index that
serves PyPI's JSON API beside it (``<root>/pypi/<name>/json`` where the index is ``<root>/simple``), the
project's JSON, which also answers for a name that is registered with no files (the simple page 404s
then). A name is free only when neither answers 200. Exit 0 when every name is free, 1 otherwise.
"""
from __future__ import annotations

import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bisector.sources.installer_config import default_index_url, pip_settings  # noqa: E402


def urls(index: str, name: str) -> dict[str, str]:
    """The simple page and (where the index has the PyPI layout) the JSON API URL for ``name``."""
    index = index.rstrip("/")
    out = {"simple": f"{index}/{canonicalize_name(name)}/"}
    if index.endswith("/simple"):
        out["json"] = f"{index.removesuffix('/simple')}/pypi/{canonicalize_name(name)}/json"
    return out


def status(url: str) -> int:
    """The HTTP status the index answers (0 when it cannot be reached); a ``file://`` index's page is
    200 when it exists, else 404."""
    if url.startswith("file://"):
        page = Path(url.removeprefix("file://"))
        return 200 if (page / "index.html").is_file() or page.is_file() else 404
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def main(names: list[str]) -> int:
    names = names or [tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]]
    index, free = default_index_url(), True
    extra = pip_settings().extra_index_urls
    print(f"index (from the installers' configuration): {index}" + (f"; pip's extra indexes: {' '.join(extra)}"
                                                                     if extra else ""))
    for name in names:
        answers = {kind: status(url) for kind, url in urls(index, name).items()}
        answers.update({f"extra {i + 1}": status(urls(e, name)["simple"]) for i, e in enumerate(extra)})
        taken = any(code == 200 for code in answers.values()) or any(code == 0 for code in answers.values())
        free = free and not taken
        said = ", ".join(f"{kind} {code or 'unreachable'}" for kind, code in answers.items())
        print(f"{name}: {said}: {'taken (or unknown)' if taken else 'free'}")
    return 0 if free else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
