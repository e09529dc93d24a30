"""A PEP 503 (HTML) project page read into the shape of a PEP 691 JSON page, for indexes that serve only
HTML (PyTorch's wheel indexes do): each anchor is a file with its URL (absolute), its hashes (the URL's
``#sha256=`` fragment), its PEP 592 yank and its PEP 658 / 714 core-metadata. HTML pages carry no sizes
and no upload times."""
from __future__ import annotations

import html.parser
import urllib.parse
from typing import Any, Optional


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[dict[str, Optional[str]], str]] = []
        self._open: Optional[dict[str, Optional[str]]] = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.found.append((self._open, "".join(self._text).strip()))
            self._open = None


def _hashes(fragment: str) -> dict[str, str]:
    name, _, value = fragment.partition("=")
    return {name: value} if name and value else {}


def _metadata(attrs: dict[str, Optional[str]]) -> Any:
    """PEP 714's ``data-core-metadata`` (or PEP 658's older name): True, or its hashes, or absent (False)."""
    value = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
    if value is None:
        return False
    return _hashes(value) or True


def page_from_html(text: str, page_url: str) -> dict[str, Any]:
    """The files of a PEP 503 project page as PEP 691 ``files`` entries (URLs made absolute)."""
    parser = _Anchors()
    parser.feed(text)
    files = []
    for attrs, label in parser.found:
        href = attrs.get("href")
        if not href:
            continue
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1]) or label
        yanked = attrs.get("data-yanked")
        files.append({"filename": filename, "url": url, "hashes": _hashes(fragment),
                      "yanked": (yanked or True) if yanked is not None else False,
                      "core-metadata": _metadata(attrs)})
    return {"meta": {"api-version": "1.0"}, "files": files}
