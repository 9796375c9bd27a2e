"""``COPY /files/incoming/<name>``: the WLCG HTTP-TPC pull (``Source: <http(s) url>``, ``X-Number-Of-Streams``,
``Credential: none``, the agent's API token, or in token mode a bearer token granting create on
``/incoming/<name>``; ``TransferHeaderAuthorization`` is sent to the source as its ``Authorization``, as XRootD and
dCache do). Answers ``202`` with a ``text/perf-marker-stream`` body of ``Perf Marker`` ... ``End`` blocks every
``marker_interval`` seconds and a final ``success: Created`` or ``failure: <reason>`` line; the whole COPY has the
``copy_timeout`` deadline. The landed file's adler32 is recorded for ``Want-Digest`` (landed.py)."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse

from ...files import adler32_of
from .client import COPY_GRACE, Counter, PullError, SocketRegistry, client_ssl_context, digest_checksum, pull
from .handler import FilesHandler

log = logging.getLogger(__name__)


class CopyHandler(FilesHandler):
    """The data server's handler: FilesHandler's requests plus COPY."""

    # -- WLCG HTTP-TPC pull
    def do_COPY(self) -> None:  # noqa: N802
        target = self._incoming("write to", "create")
        if target is None:
            return
        dest, name = target
        source = self.headers.get("Source")
        if not source:
            self._error(400, "COPY needs a Source: <url> header (pull mode); push mode is not supported")
            return
        source_auth = self.headers.get("TransferHeaderAuthorization")
        if source_auth is not None and (not source_auth.isprintable() or len(source_auth) > 16384):
            self._error(400, "TransferHeaderAuthorization must be one printable line")
            return
        cred = self.headers.get("Credential", "none")
        if cred.lower() != "none":
            self._error(400, f"Credential: {cred!r} is not supported; use Credential: none")
            return
        try:
            streams = int(self.headers.get("X-Number-Of-Streams", "1"))
            if not 0 <= streams <= 100:
                raise ValueError
        except ValueError:
            self._error(400, "X-Number-Of-Streams must be an integer 0-100")
            return
        u = urllib.parse.urlsplit(source)
        if u.scheme not in ("http", "https") or not u.hostname:
            self._error(400, f"Source {source!r} must be an http:// or https:// URL")
            return
        port = u.port or (443 if u.scheme == "https" else 80)
        ssl_ctx = client_ssl_context(self.server.settings) if u.scheme == "https" else None
        dest.parent.mkdir(parents=True, exist_ok=True)

        self.send_response(202)
        self.send_header("Content-Type", "text/perf-marker-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        registry = SocketRegistry()
        counter = Counter()
        outcome: dict[str, BaseException | int] = {}

        verify = self.headers.get("RequireChecksumVerification", "false").lower() == "true"

        settings = self.server.settings
        landed = self.server.landed

        def work() -> None:
            meta: dict[str, str] = {}
            try:
                outcome["bytes"] = pull(u.hostname or "", port, u.path or "/", None, dest, max(1, streams), registry,
                                        counter, ssl_ctx, settings.idle_timeout, meta=meta if verify else None,
                                        auth=source_auth)
                if verify:
                    expected = digest_checksum(meta.get("digest"))
                    if expected is None:
                        raise PullError("checksum verification asked for, but the source sent no adler32 Digest")
                    got = adler32_of(dest)
                    if got != expected:
                        raise PullError(f"checksum mismatch: source says {expected}, received {got}")
                    landed.record(dest, got)
            except BaseException as e:  # reported in the final line
                outcome["error"] = e

        worker = threading.Thread(target=work, daemon=True, name=f"copy-{name}")
        worker.start()
        # the whole COPY has a deadline, so an XRootD or curl caller always gets its final line
        deadline = time.monotonic() + settings.copy_timeout
        try:
            self._chunk(self._marker(counter.value, streams))
            while worker.is_alive():
                now = time.monotonic()
                worker.join(max(0.0, min(settings.marker_interval, deadline - now)) or COPY_GRACE)
                if not worker.is_alive():
                    break
                if time.monotonic() >= deadline:
                    if not registry.cancelled:
                        registry.cancel(f"timed out after {settings.copy_timeout:g} s")
                        continue  # the shut-down sockets end the pull at once
                    # the pull did not stop within the grace: answer anyway (the daemon thread is abandoned)
                    outcome.setdefault("error", PullError(f"timed out after {settings.copy_timeout:g} s"))
                    log.warning("COPY to %s: the pull did not stop %g s after its deadline", name, COPY_GRACE)
                    break
                self._chunk(self._marker(counter.value, streams))
            err = outcome.get("error")
            if err is None:
                self._chunk(self._marker(counter.value, streams) + "success: Created\n")
            else:
                landed.forget(dest)
                dest.unlink(missing_ok=True)
                msg = str(err).replace("\n", " ")
                self._chunk(f"failure: {msg}\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away: stop pulling
            registry.cancel("client disconnected")
            worker.join(5)
            dest.unlink(missing_ok=True)
            return
        if "error" not in outcome:
            try:
                landed.checksum(dest)  # once, now (the client has its answer); a no-op when verified
            except OSError as e:
                log.info("COPY to %s: no checksum of the landed file: %s", name, e)

    def _marker(self, nbytes: int, streams: int) -> str:
        return (f"Perf Marker\nTimestamp: {int(time.time())}\nStripe Index: 0\n"
                f"Stripe Bytes Transferred: {nbytes}\nTotal Stripe Count: 1\nEnd\n")

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

