"""What a package index answers, read within bounds and checked before anything uses it.

A project page (release and nightly indexes alike: the PEP 691 JSON page, or the PEP 503 HTML one read into its
shape) is read by :func:`read_answer` within a connect timeout (:data:`CONNECT_S`), a deadline for the whole
answer (:func:`deadline`, 45 s: a server that trickles bytes is cut off) and a size bound (:data:`MAX_BYTES`); JSON
nested deeper than Python can read is refused, not a RecursionError. :func:`checked_page` validates it
(:class:`ProjectPage`: an object with a list of file objects, each with its file name; a list where an object
belongs, a hash that is no string, an upload time that is not an ISO 8601 text (an integer, "yesterday") are
refused) and gives it back normalised: every upload time an ISO text in UTC (a time without a zone is read as
UTC, as PEP 700 writes them, so naive and aware times never meet). Every refusal is one line naming the index
(:class:`~bisector.errors.UsageError`, exit 2).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
import urllib.request
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bisector.errors import UsageError, cut

CONNECT_S = 10.0                                    # to connect, and the longest wait for any byte
DEADLINE_S = 45.0                                   # for a whole answer (BISECTOR_INDEX_DEADLINE_S sets another)
MAX_BYTES = 64 << 20                                # PyPI's torch page is about 2 MB, PyTorch's nightly HTML 10


def _time(value: Any) -> Optional[str]:
    """An upload time as stored on a page: ISO 8601 text, in UTC (a naive time is UTC); ValueError otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"an upload time is ISO 8601 text, not {type(value).__name__} {cut(repr(value))}")
    try:
        moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{cut(repr(value))} is not an ISO 8601 time") from None
    moment = moment.replace(tzinfo=dt.timezone.utc) if moment.tzinfo is None else moment.astimezone(dt.timezone.utc)
    return moment.isoformat().replace("+00:00", "Z")


class IndexFile(BaseModel):
    """One file of a project page (PEP 691, 700, 714), with the fields bisector reads."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    filename: str
    url: str = ""
    hashes: dict[str, str] = {}
    size: Optional[int] = None
    yanked: Union[bool, str] = False
    upload_time: Optional[str] = Field(None, alias="upload-time")
    core_metadata: Union[bool, dict[str, str]] = Field(False, alias="core-metadata")
    dist_info_metadata: Union[bool, dict[str, str]] = Field(False, alias="dist-info-metadata")
    data_dist_info_metadata: Union[bool, dict[str, str]] = Field(False, alias="data-dist-info-metadata")
    requires_python: Optional[str] = Field(None, alias="requires-python")

    @field_validator("upload_time", mode="before")
    @classmethod
    def _upload_time(cls, value: Any) -> Optional[str]:
        return _time(value)


class ProjectPage(BaseModel):
    """A project page: its files (and PEP 700's versions, when given)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    files: list[IndexFile] = []
    versions: Optional[list[str]] = None


def checked_page(data: Any, what: str) -> dict[str, Any]:
    """``data`` (a project page as read) validated as :class:`ProjectPage` and normalised (see the module), as
    the dict every reader of pages takes; a UsageError naming ``what`` (the index and the page) otherwise."""
    if not isinstance(data, dict):
        raise UsageError(f"{what} is not a project page: a JSON {type(data).__name__} where an object belongs")
    try:
        page = ProjectPage.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the page"
        raise UsageError(f"{what} is not a valid project page: {where}: {cut(first['msg'], 200)} "
                         f"({exc.error_count()} problem(s))") from None
    return {"files": [f.model_dump(by_alias=True) for f in page.files],
            **({"versions": page.versions} if page.versions is not None else {})}


def parsed_json(raw: bytes, what: str) -> Any:
    """The JSON of an answer; nested too deep for Python to read, or not JSON: a UsageError naming ``what``."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise UsageError(f"{what} is JSON nested too deeply to read") from None
    except ValueError as exc:
        raise UsageError(f"{what} is not JSON ({cut(str(exc), 120)})") from None


def deadline() -> float:
    """Seconds a whole answer may take: BISECTOR_INDEX_DEADLINE_S when it is a positive number, else
    :data:`DEADLINE_S`."""
    try:
        value = float(os.environ.get("BISECTOR_INDEX_DEADLINE_S") or DEADLINE_S)
    except ValueError:
        return DEADLINE_S
    return value if 0 < value < float("inf") else DEADLINE_S


def read_answer(request: urllib.request.Request, what: str, deadline_s: Optional[float] = None,
                limit: int = MAX_BYTES) -> tuple[bytes, str]:
    """(the body, its content type) of the answer to ``request``, read within :data:`CONNECT_S` to connect and
    ``deadline_s`` (default: :func:`deadline`) for the whole answer, at most ``limit`` bytes. HTTP errors and
    the network's own refusals are raised as urllib raises them; a deadline or the size bound passed is a
    UsageError naming ``what``."""
    deadline_s = deadline() if deadline_s is None else deadline_s
    done, stop = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def fetch() -> None:
        try:
            with urllib.request.urlopen(request, timeout=min(CONNECT_S, deadline_s)) as response:
                ctype, chunks, size = response.headers.get("Content-Type") or "", [], 0
                while not stop.is_set():
                    chunk = response.read1(1 << 16)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise UsageError(f"{what} answered more than {limit >> 20} MiB: not a project page "
                                         "bisector reads")
                    chunks.append(chunk)
                box["answer"] = (b"".join(chunks), ctype)
        except BaseException as exc:   # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=fetch, name="index-answer", daemon=True).start()
    if not done.wait(deadline_s):
        stop.set()   # (the reader stops at its next byte, or at its own timeout)
        raise UsageError(f"{what} did not answer in full within {deadline_s:g} s (a server that trickles its "
                         f"answer, or one far too slow): cut off after {time.monotonic() - started:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["answer"]
