"""Keep credentials out of logs and reports."""
from __future__ import annotations

import re
import urllib.parse

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def redact_url(url: str) -> str:
    """Replace any ``user:password@`` part of a URL with ``***@``."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))
    return url


def redact_text(text: str) -> str:
    """Redact credentials in every URL inside free text (commands, logs, error messages)."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
