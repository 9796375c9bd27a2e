"""The sender's side of a built-in test's TCP telemetry. Only the sender counts retransmits, so the pulling agent
asks for them: its data GETs carry ``X-Tpcmesh-Telemetry: <test id>/<file name>``; the source's data server samples
each such connection while it sends, waits for the last byte to be acknowledged, and keeps the connection's
summary; ``GET /tcp-info/<test id>`` (answered once: the views are handed over and forgotten) returns
``{"files": {name: [summary per connection]}}`` after waiting for the test's connections still sending.

Not authenticated, like the set files themselves: it tells the TCP figures of a test whose random id one knows.
The store is bounded (the oldest tests are dropped), so views nobody fetches cannot pile up."""

from __future__ import annotations

import http.client
import json
import logging
import re
import ssl
import threading
import time
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

KEY_RE = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/([A-Za-z0-9._-]{1,200})$")
PATH_RE = re.compile(r"^/tcp-info/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
MAX_TESTS = 64  # tests whose views are kept until fetched
DRAIN_TIMEOUT = 10.0  # seconds a sender waits for its last bytes to be acknowledged before summarising anyway
TAKE_WAIT = DRAIN_TIMEOUT + 2.0  # seconds GET /tcp-info waits for connections still sending
FETCH_TIMEOUT = TAKE_WAIT + 5.0


def parse_key(header: str | None) -> tuple[str, str] | None:
    """(test id, file name) of a telemetry header; None when absent or malformed (then nothing is kept)."""
    m = KEY_RE.match(header or "")
    return (m.group(1), m.group(2)) if m else None


class SenderViews:
    """Per test: how many of its connections are still sending, and each file's connection summaries."""

    def __init__(self, max_tests: int = MAX_TESTS) -> None:
        self.max_tests = max_tests
        self._cond = threading.Condition()
        self._tests: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _test(self, test_id: str) -> dict[str, Any]:
        t = self._tests.get(test_id)
        if t is None:
            t = self._tests[test_id] = {"sending": 0, "files": {}}
            while len(self._tests) > self.max_tests:
                self._tests.popitem(last=False)
        return t

    def begin(self, test_id: str) -> None:
        with self._cond:
            self._test(test_id)["sending"] += 1

    def end(self, test_id: str, name: str, summary: dict[str, Any] | None) -> None:
        with self._cond:
            t = self._test(test_id)
            t["sending"] = max(0, t["sending"] - 1)
            if summary is not None:
                t["files"].setdefault(name, []).append(summary)
            self._cond.notify_all()

    def take(self, test_id: str, wait: float = TAKE_WAIT) -> dict[str, list[dict[str, Any]]]:
        """The test's views once none of its connections is sending (or ``wait`` s passed), then forgotten."""
        deadline = time.monotonic() + wait
        with self._cond:
            while (t := self._tests.get(test_id)) is not None and t["sending"] > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            t = self._tests.pop(test_id, None)
            return t["files"] if t else {}


def fetch_sender_views(host: str, port: int, test_id: str, ssl_ctx: ssl.SSLContext | None,
                       timeout: float = FETCH_TIMEOUT) -> dict[str, list[dict[str, Any]]] | None:
    """The source's views of a test's files (GET /tcp-info/<test id>); None when it has none to give (an older
    agent answers 404) or cannot be asked: the record then has no sender side, and says nothing false."""
    conn: http.client.HTTPConnection = (http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl_ctx)
                                        if ssl_ctx is not None else http.client.HTTPConnection(host, port,
                                                                                               timeout=timeout))
    try:
        conn.request("GET", f"/tcp-info/{test_id}", headers={"User-Agent": "tpcmesh-agent"})
        resp = conn.getresponse()
        body = resp.read(1 << 24)
        if resp.status != 200:
            log.info("Source %s:%d answered %d for the TCP view of test %s", host, port, resp.status, test_id)
            return None
        files = json.loads(body)["files"]
        if not isinstance(files, dict):
            raise ValueError("files is not an object")
        return files
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException) as e:
        log.info("Could not fetch the TCP view of test %s from %s:%d: %s", test_id, host, port, e)
        return None
    finally:
        conn.close()
