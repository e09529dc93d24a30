"""The one redaction pass: what is stored or rendered never carries a secret or the user's home directory.

:func:`redact_text` is applied at every boundary where text leaves the process: each column of a
store row as it is written (bisector.store.storage), everything printed (the CLI wraps stdout and stderr
in :class:`RedactingStream`) and every report file (markdown, JSON, HTML). It replaces

* credentials in URLs (``https://user:secret@host`` -> ``https://***@host``);
* tokens of the common forms: Hugging Face (``hf_...``), GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``,
  ``ghr_``, ``github_pat_...``), AWS access key ids (``AKIA...``), PEM private keys;
* the value of anything named like a secret: ``HF_TOKEN=...``, ``"api_key": "..."``, ``password: ...``,
  ``--hf-token ...``, ``--wandb_key=...``, ``Authorization: Bearer ...``;
* the literal value of every environment variable named like a secret (however it is printed);
* the user's home directory, as ``~``.

A command is masked word by word (:func:`mask_words`): the value after a flag whose name ends in a
secret's word (``--password hunter2``, ``--hub_token=hf_x``, any case, ``_`` or ``-``), whatever it is,
and every word through the text pass. :func:`redact_data` is the pass over data (what is stored, a JSON
document): every string through the text pass, every list of strings as words, every string value of a
key named like a secret masked; JSON stays JSON by construction. :func:`redact_output` is what leaves
the process as text: a JSON document through :func:`redact_data`, anything else through the text pass.
The passes are idempotent.
"""
from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, Optional

from bisector.safety.safe_text import json_visible
from bisector.safety.safe_write import write_atomic

MASK = "***"
SECRET_NAME = r"(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API[_-]?KEY|ACCESS[_-]?KEY|SECRET[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIALS?|AUTH)"
# a flag whose name ends so takes a secret (--hub_token, --dbpassword, --wandb-key, --apikey, --basic_auth; not --monkey)
FLAG_SECRET = (r"(?:[\w-]*?(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY)|(?:[\w-]*?[_-])?(?:KEY|AUTH))")
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
    (("sk-",), re.compile(r"(?<![A-Za-z0-9_-])(sk-)[A-Za-z0-9_-]{20,}"), _keep(1)),   # OpenAI, Anthropic, ...
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
    # --hf-token value, --wandb_key=value
    (("--",), re.compile(r"(?i)(?<![\w-])(--" + FLAG_SECRET + r"(?:[ \t]+|=)" + _Q + r")" + _VALUE), _keep(1)),
]


_TRIGGERS = tuple(sorted({w for words, _, _ in _RULES for w in words} | {"://"}))   # where any rule can start


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


def _home(text: str, home: Optional[str] = None) -> str:
    """The home directory as ``~`` where it starts a path (not inside another name: /root but not /rootfs)."""
    home = home or os.path.expanduser("~")
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


def redact_text(text: str, home: bool = True, env_secrets: Optional[list[str]] = None,
                home_dir: Optional[str] = None) -> str:
    """``text`` without secrets or (unless ``home`` is False: the environment cache, whose paths are how an
    environment is found again) the home directory (see the module); ``env_secrets``: the environment's
    secret values when the caller has them (:func:`redact_data` reads them once for a whole document)."""
    if not text:
        return text
    for value in _env_secrets() if env_secrets is None else env_secrets:
        if value in text:
            text = text.replace(value, MASK)
    low = text.lower()
    if not any(word in low for word in _TRIGGERS):   # no word any rule starts with (most text): only the home directory to see to
        return _home(text, home_dir) if home else text
    if "://" in text and "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
        low = text.lower()
    for words, pattern, replace in _RULES:
        done = _apply(words, pattern, replace, text, low)
        if done is not text:
            text, low = done, done.lower()
    return _home(text, home_dir) if home else text


_SECRET_FLAG = re.compile(r"(?i)(--?" + FLAG_SECRET + r")(?:=(.*))?", re.S)
_SECRET_KEY = re.compile(r"(?i)" + SECRET_NAME + r"$")
_NOT_SECRET = re.compile(r"(?i)[\d.+-]*|true|false|null|none|\s*")   # a number or a literal is no secret


def mask_words(words: Iterable[str], env_secrets: Optional[list[str]] = None) -> list[str]:
    """A command's words with every secret masked (see the module): the value after a flag named like a secret
    (the next word, unless it is a flag itself; or what follows ``=``), and each word through the text pass
    (tokens of known shapes, ``user:password@`` in URLs, ``NAME=value``). The home directory is kept: a word
    is run. Idempotent."""
    secrets = _env_secrets() if env_secrets is None else env_secrets
    out: list[str] = []
    value_next = False
    for word in map(str, words):
        if value_next and word and not word.startswith("--"):
            out.append(MASK)
            value_next = False
            continue
        flag = _SECRET_FLAG.fullmatch(word)
        value_next = bool(flag) and flag.group(2) is None
        if flag and flag.group(2):
            out.append(f"{flag.group(1)}={MASK}")
        else:
            out.append(word if value_next else redact_text(word, home=False, env_secrets=secrets))
    return out


def redact_data(value: Any, home: bool = True) -> Any:
    """``value`` (JSON-like data: what is stored, what a JSON document holds) without secrets: every string
    through the text pass, every list of strings masked as a command's words (:func:`mask_words`), the
    string value of a key named like a secret (``"api_key": "..."``) masked; numbers and literals kept."""
    secrets, seen, home_dir = _env_secrets(), {}, os.path.expanduser("~")

    def text(v: str) -> str:   # (a document repeats its strings: a cell's name, a path)
        if v not in seen:
            seen[v] = redact_text(v, home, secrets, home_dir)
        return seen[v]

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, dict):
            return {text(k) if isinstance(k, str) else k:
                    MASK if isinstance(x, str) and _secret_value(k, x) else walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            if v and all(isinstance(x, str) for x in v):
                words = mask_words(v, secrets)
                return [text(w) for w in words] if home else words
            return [walk(x) for x in v]
        return v

    return walk(value)


def _secret_value(key: Any, value: Any) -> bool:
    return (isinstance(key, str) and isinstance(value, str) and bool(_SECRET_KEY.search(key))
            and not _NOT_SECRET.fullmatch(value))


def _json_document(text: str) -> Optional[tuple[Any, Optional[int], str]]:
    """``text`` read as one JSON object or array: (its data, the indent it was written with, what trailed it);
    None for any other text."""
    body = text.strip()
    if not body or body[0] not in "{[" or body[-1] not in "}]":
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    second = body.split("\n", 2)[1] if "\n" in body else ""
    indent = len(second) - len(second.lstrip(" ")) if second else None
    return data, indent, text[len(text.rstrip()):]


def redact_output(text: str, home: bool = True) -> str:
    """What leaves the process as text, redacted: a JSON document through :func:`redact_data` (written again
    as it was laid out: it stays JSON, whatever its strings hold), any other text through the text pass."""
    doc = _json_document(text) if text and text.lstrip()[:1] in ("{", "[") else None
    if doc is None:
        return redact_text(text, home)
    data, indent, tail = doc
    return json_visible(json.dumps(redact_data(data, home), indent=indent or None, ensure_ascii=False)) + tail


def write_redacted(path: Path, text: str) -> Path:
    """Write a report file (markdown, JSON, HTML) through the redaction pass, atomically and never
    through a symlink (bisector.safety.safe_write)."""
    return write_atomic(path, redact_output(text))


class RedactingStream:
    """A text stream that redacts everything written through it (stdout and stderr of the CLI)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_output(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
