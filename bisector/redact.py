"""The one redaction pass: what is stored or rendered never carries a secret or the user's home directory.

:func:`redact_text` is applied at every boundary where text leaves the process: each column of a
store row as it is written (bisector.store.storage), everything printed (the CLI wraps stdout and stderr
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

from bisector.safety.safe_write import write_atomic

MASK = "***"
SECRET_NAME = r"(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API[_-]?KEY|ACCESS[_-]?KEY|SECRET[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIALS?|AUTH)"
MIN_ENV_SECRET = 6   # shorter values of secret-named variables ("1", "true") are not worth masking everywhere

_USERINFO = re.compile(r"(?<![a-zA-Z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s\"'\\<>]+)@")
_Q = r"(?:\\?[\"'])?"   # a quote, or one escaped inside JSON text
_VALUE = r"(?!\*\*\*)(?!(?:true|false|null|none)\b)(?=[^\s\"'\\,;&]*[^\s\d\"'\\,;&.+-])[^\s\"'\\,;&]+"


def _keep(group: int):
    return lambda m: m.group(group) + MASK


# (where a match may start: lower-case words, the pattern matched there, the replacement). Each pattern is
# only tried where one of its words starts, so a page of text costs a few substring searches.
_RULES = [
    (("hf_",), re.compile(r"(?<![A-Za-z0-9_])(hf_)[A-Za-z0-9]{16,}"), _keep(1)),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"(?<![A-Za-z0-9_])(gh[pousr]_)[A-Za-z0-9]{16,}"), _keep(1)),
    (("github_pat_",), re.compile(r"(?<![A-Za-z0-9_])(github_pat_)[A-Za-z0-9_]{16,}"), _keep(1)),
    (("akia", "asia", "aida", "aroa", "agpa", "anpa", "anva", "aipa"),
     re.compile(r"(?<![A-Za-z0-9])(AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"), _keep(1)),
    (("-----begin",), re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     lambda m: "-----BEGIN PRIVATE KEY----- " + MASK),
    # Authorization: Bearer xyz / "authorization": "token xyz" / Proxy-Authorization: Basic xyz
    (("authorization",), re.compile(r"(?i)(authorization" + _Q + r"\s*[:=]\s*" + _Q + r"(?:(?:bearer|basic|token|digest)\s+)?)"
                                    r"(?!\*\*\*)[^\s\"'\\,;&]+"), _keep(1)),
    # NAME=value, "name": "value", name: value (a value that is not a number or a JSON literal); the name ends at the
    # secret's word (HF_TOKEN= but not max_tokens=), whatever comes before it is kept as it is
    (("token", "secret", "passw", "passphrase", "api", "access", "private", "credential", "auth"),
     re.compile(r"(?i)(" + SECRET_NAME + _Q + r"[ \t]*[=:][ \t]*" + _Q + r")" + _VALUE), _keep(1)),
    # --hf-token value
    (("--",), re.compile(r"(?i)(?<![\w-])(--[\w-]*?" + SECRET_NAME + r"[ \t]+" + _Q + r")" + _VALUE), _keep(1)),
]


def _apply(words: tuple[str, ...], pattern: re.Pattern, replace, text: str, low: str) -> str:
    """``pattern.sub(replace, text)``, trying ``pattern`` only where one of ``words`` starts in ``low``
    (``text`` in lower case)."""
    starts = sorted({i for word in words for i in _positions(low, word)})
    out, last = [], 0
    for start in starts:
        if start < last:
            continue
        match = pattern.match(text, start)
        if match:
            out += [text[last:start], replace(match)]
            last = match.end()
    return "".join(out) + text[last:] if out else text


def _positions(text: str, word: str):
    i = text.find(word)
    while i >= 0:
        yield i
        i = text.find(word, i + 1)


@functools.lru_cache(maxsize=8)
def _home_pattern(home: str) -> re.Pattern | None:
    if not home or home.rstrip("/") == "":
        return None
    homes = sorted({home.rstrip("/"), os.path.realpath(home).rstrip("/")}, key=len, reverse=True)
    return re.compile("|".join(re.escape(h) for h in homes) + r"(?=[/\\\s\"'`:,;)\]}>]|$)")


def _home(text: str) -> str:
    """The home directory as ``~`` where it starts a path (not inside another name: /root but not /rootfs)."""
    home = os.path.expanduser("~")
    pattern = _home_pattern(home)
    if pattern is None or home.rstrip("/") not in text:
        return text
    return pattern.sub(lambda m: m.group(0) if m.start() and (text[m.start() - 1].isalnum() or
                                                              text[m.start() - 1] in "_.~-") else "~", text)


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


def redact_text(text: str, home: bool = True) -> str:
    """``text`` without secrets or (unless ``home`` is False: the environment cache, whose paths are how an
    environment is found again) the home directory (see the module); JSON text stays valid JSON."""
    if not text:
        return text
    for value in _env_secrets():
        text = text.replace(value, MASK)
    if "://" in text and "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    low = text.lower()
    for words, pattern, replace in _RULES:
        done = _apply(words, pattern, replace, text, low)
        if done is not text:
            text, low = done, done.lower()
    return _home(text) if home else text


def write_redacted(path: Path, text: str) -> Path:
    """Write a report file (markdown, JSON, HTML) through the redaction pass, atomically and never
    through a symlink (bisector.safety.safe_write)."""
    return write_atomic(path, redact_text(text))


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
