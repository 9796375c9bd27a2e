"""Incremental parser for third-party-copy performance-marker streams.

Understands the three dialects met in the wild:

* XRootD / WLCG HTTP-TPC (``text/perf-marker-stream``)::

      Perf Marker
      Timestamp: 1795305724
      Stripe Index: 0
      Stripe Bytes Transferred: 5000000
      Total Stripe Count: 1
      RemoteConnections: tcp:127.0.1.1:8444
      End

* dCache: the same keys, indented with a tab;
* GridFTP control channel: ``112-Perf Marker`` / ``112-Timestamp: …`` / ``112 End.``.

Final lines: ``success: Created``, ``Success``, ``failure: <msg>``, ``aborted: <msg>``, ``Failed: <msg>``.
A stream that ends without a final line is a failure. Feed bytes or text in chunks of any size; the last
line may lack a trailing newline (XRootD sends ``success: Created`` without one), so call :meth:`close`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PerfMarker:
    timestamp: float | None = None
    stripe_index: int = 0
    stripe_bytes: int = 0
    stripe_count: int = 1
    remote_connections: list[str] = field(default_factory=list)


@dataclass
class MarkerResult:
    """The outcome once the stream has ended: ok, the message of the final line, and every marker."""

    ok: bool
    message: str
    markers: list[PerfMarker]

    @property
    def bytes_transferred(self) -> int:
        """Bytes of the last marker summed over stripes (0 without markers)."""
        last: dict[int, int] = {}
        for m in self.markers:
            last[m.stripe_index] = m.stripe_bytes
        return sum(last.values())


class MarkerStreamError(ValueError):
    """A line that belongs to no known dialect inside a marker block."""


_SUCCESS = ("success",)
_FAILURE = ("failure", "failed", "aborted", "error")


class MarkerParser:
    """Feed chunks with :meth:`feed`; each completed marker is returned; :meth:`close` gives the result."""

    def __init__(self) -> None:
        self._buffer = ""
        self._current: PerfMarker | None = None
        self.markers: list[PerfMarker] = []
        self.final: tuple[bool, str] | None = None
        self.unparsed: list[str] = []  # lines outside blocks that are no final line (kept for error messages)

    # -- input -------------------------------------------------------------------------------------------------
    def feed(self, chunk: bytes | str) -> list[PerfMarker]:
        text = chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk
        self._buffer += text
        done: list[PerfMarker] = []
        while True:
            cut = self._buffer.find("\n")
            if cut < 0:
                break
            line, self._buffer = self._buffer[:cut], self._buffer[cut + 1 :]
            marker = self._line(line)
            if marker is not None:
                done.append(marker)
        return done

    def close(self) -> MarkerResult:
        if self._buffer:
            rest, self._buffer = self._buffer, ""
            try:
                self._line(rest)
            except MarkerStreamError:  # a truncated last line: the stream was cut
                self.unparsed.append(rest)
        if self.final is None:
            tail = "; ".join(self.unparsed[-3:])
            why = "marker stream ended without a final success or failure line"
            if self._current is not None:
                why = "marker stream ended inside a Perf Marker block"
            return MarkerResult(False, f"{why}{': ' + tail if tail else ''}", self.markers)
        ok, message = self.final
        return MarkerResult(ok, message, self.markers)

    # -- one line ---------------------------------------------------------------------------------------------
    def _line(self, raw: str) -> PerfMarker | None:
        line = raw.rstrip("\r")
        gridftp = False
        if line[:4] in ("112-", "112 "):
            gridftp = True
            line = line[4:]
        stripped = line.strip()
        if not stripped:
            return None
        if stripped == "Perf Marker":
            self._current = PerfMarker()
            return None
        if stripped in ("End", "End.") and (self._current is not None or gridftp):
            marker, self._current = self._current, None
            if marker is not None:
                self.markers.append(marker)
            return marker
        if self._current is not None:
            key, sep, value = stripped.partition(":")
            if not sep:
                raise MarkerStreamError(f"line {raw!r} inside a Perf Marker block has no 'key: value'")
            self._set(self._current, key.strip().lower(), value.strip(), raw)
            return None
        self._final_line(stripped)
        return None

    @staticmethod
    def _set(marker: PerfMarker, key: str, value: str, raw: str) -> None:
        try:
            if key == "timestamp":
                marker.timestamp = float(value)
            elif key == "stripe index":
                marker.stripe_index = int(value)
            elif key == "stripe bytes transferred":
                marker.stripe_bytes = int(value)
            elif key == "total stripe count":
                marker.stripe_count = int(value)
            elif key == "remoteconnections":
                marker.remote_connections = [c for c in value.split(",") if c]
            # unknown keys are ignored: servers add their own (e.g. dCache's "State")
        except ValueError as exc:
            raise MarkerStreamError(f"bad value in marker line {raw!r}: {exc}") from exc

    def _final_line(self, line: str) -> None:
        word, sep, rest = line.partition(":")
        lowered = word.strip().lower()
        if lowered in _SUCCESS:
            self.final = (True, rest.strip() or word.strip())
        elif lowered in _FAILURE and (sep or lowered != "error"):
            self.final = (False, rest.strip() or word.strip())
        else:
            self.unparsed.append(line)


def parse(text: bytes | str) -> MarkerResult:
    """Parse a whole body at once."""
    parser = MarkerParser()
    parser.feed(text)
    return parser.close()
