"""The one redaction pass: what is stored or rendered never carries a secret or the user's home directory.

:func:`redact_text` is applied at every boundary where text leaves the process: each column of a
store row as it is written (bisector.storage), everything printed (the CLI wraps stdout and stderr
in :class:`RedactingStream`) and every report file (markdown, JSON, HTML). It replaces

* credentials in URLs (``https://user:secret@host`` -> ``https://***@host``);
* tokens of the common forms: Hugging Face (``hf_...``), GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``,
  ``ghr_``, ``github_pat_...``), AWS access key ids (``AKIA...``), PEM private keys;
* the value of anything named like a secret: ``HF_TOKEN=...``, ``"api_key": "..."``, ``password: ...``,
  ``--hf-token ...``, ``Authorization: Bearer ...``;
* the literal value of every environment variable named like a secret (however it is printed);
* the user's home directory, as ``~``.

Every replacement keeps JSON valid (only text inside strings is replaced, never a number or a
quote), and the pass is idempotent.
"""
from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

MASK = "***"
SECRET_NAME = r"(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API[_-]?KEY|ACCESS[_-]?KEY|SECRET[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIALS?|AUTH)"
MIN_ENV_SECRET = 6   # shorter values of secret-named variables ("1", "true") are not worth masking everywhere

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s\"'\\<>]+)@")
_TOKENS = [
    (re.compile(r"\b(hf_)[A-Za-z0-9]{16,}"), r"\1" + MASK),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{16,}"), r"\1" + MASK),
    (re.compile(r"\b(github_pat_)[A-Za-z0-9_]{16,}"), r"\1" + MASK),
    (re.compile(r"\b(AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"), r"\1" + MASK),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     "-----BEGIN PRIVATE KEY----- " + MASK),
]
# Authorization: Bearer xyz / "authorization": "token xyz" / Proxy-Authorization: Basic xyz
_Q = r"(?:\\?[\"'])?"   # a quote, or one escaped inside JSON text
_AUTH_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization" + _Q + r"\s*[:=]\s*" + _Q + r")(?:(bearer|basic|token|digest)\s+)?"
                          r"(?!\*\*\*)[^\s\"'\\,;&]+")
_VALUE = r"(?!\*\*\*)(?!(?:true|false|null|none)\b)(?=[^\s\"'\\,;&]*[^\s\d\"'\\,;&.+-])[^\s\"'\\,;&]+"
# NAME=value, "name": "value", name: value (a value that is not a number or a JSON literal), --name value
_ASSIGNED = re.compile(r"(?i)(?<![\w-])([\w.-]*" + SECRET_NAME + r")(" + _Q + r"[ \t]*[=:][ \t]*" + _Q + r")" + _VALUE)
_FLAG = re.compile(r"(?i)(?<![\w-])(--[\w-]*" + SECRET_NAME + r")([ \t]+" + _Q + r")" + _VALUE)


@functools.lru_cache(maxsize=8)
def _home_pattern(home: str) -> re.Pattern | None:
    if not home or home.rstrip("/") == "":
        return None
    homes = sorted({home.rstrip("/"), os.path.realpath(home).rstrip("/")}, key=len, reverse=True)
    alternatives = "|".join(re.escape(h) for h in homes if h)
    return re.compile(r"(?<![\w.~-])(?:file://)?(?:" + alternatives + r")(?=[/\\\s\"'`:,;)\]}>]|$)")


def _env_secrets() -> list[str]:
    """The values of this process's environment variables that are named like secrets, longest first."""
    name = re.compile(r"(?i)" + SECRET_NAME)
    values = {v for k, v in os.environ.items() if name.search(k) and len(v) >= MIN_ENV_SECRET and v.strip()}
    for value in list(values):
        values.add(json.dumps(value)[1:-1])   # as it appears inside JSON text
    return sorted(values, key=len, reverse=True)


def redact_url(url: str) -> str:
    """Replace any ``user:password@`` part of a URL with ``***@``."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))
    return url


def redact_text(text: str) -> str:
    """``text`` without secrets or the home directory (see the module); JSON text stays valid JSON."""
    if not text:
        return text
    for value in _env_secrets():
        text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    for pattern, replacement in _TOKENS:
        text = pattern.sub(replacement, text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + MASK, text)
    for pattern in (_ASSIGNED, _FLAG):
        text = pattern.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    home = _home_pattern(os.path.expanduser("~"))
    return home.sub("~", text) if home is not None else text


def redact_data(data: Any) -> Any:
    """``data`` (JSON-like: dicts, lists, strings, numbers) with every string redacted."""
    return json.loads(redact_text(json.dumps(data)))


def write_redacted(path: Path, text: str) -> Path:
    """Write a report file (markdown, JSON, HTML) through the redaction pass."""
    path.write_text(redact_text(text))
    return path


class RedactingStream:
    """A text stream that redacts everything written through it (stdout and stderr of the CLI)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
