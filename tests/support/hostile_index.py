"""A loopback package index that answers what a test tells it to: any bytes for a project's page (a JSON list
where an object belongs, upload times that are text or integers, an array nested 100,000 deep, 10,000 nightly
days), optionally trickled a byte at a time and never finished, as a broken or hostile index would."""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Iterator

from tests.support.pkgindex import served

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


@dataclass
class Answer:
    body: bytes
    ctype: str = JSON_TYPE
    trickle_s: float = 0.0   # > 0: one byte each trickle_s seconds, the answer never finished


def json_answer(data) -> Answer:
    return Answer(json.dumps(data).encode())


class HostileIndex:
    """Pages by project name (``/simple/<name>/``); anything else is a 404."""

    def __init__(self, pages: dict[str, Answer]):
        self.pages = pages

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        pages, stop = self.pages, threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:   # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                name = self.path.strip("/").split("/")[-1]
                answer = pages.get(name)
                if answer is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", answer.ctype)
                if not answer.trickle_s:
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                    return
                self.send_header("Content-Length", str(10 * len(answer.body) + 10))   # more than will ever come
                self.end_headers()
                try:
                    for i in range(10 ** 9):
                        if stop.is_set():
                            return
                        self.wfile.write(answer.body[i % len(answer.body):][:1])
                        self.wfile.flush()
                        time.sleep(answer.trickle_s)
                except OSError:
                    return   # the client gave up

        with served(Handler) as url:
            try:
                yield url
            finally:
                stop.set()   # first: a trickling answer ends before the server shuts down
