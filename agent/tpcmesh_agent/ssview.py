"""The kernel's view of sockets the agent does not own (XRootD's and GridFTP's data connections), from iproute2's
``ss -tinH state established dst <peer>``, sampled while a test runs.

ss prints struct tcp_info as text (``rtt:12.3/0.5 minrtt:10.1 cwnd:42 retrans:0/7 ...``, zero counters left out);
``parse`` turns it back into tcpinfo's fields so the summaries have one definition (tcpinfo.summarize). Every
established connection to the test's source counts (the protocols' data channels and XRootD's control ones): this
is the destination's side, the receiver, which counts no data retransmits; its out-of-order packets and RTT do tell
a lossy or long path. Why a sender waited (ss's ``busy``, ``rwnd_limited``, ``sndbuf_limited``) is parsed too: on
these receiving sockets busy time stays about 0, so the fractions are mostly null here (a push, where this end
sends, has them). A connection that opens and closes between two samples is not seen.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import shutil
from typing import Any

from . import tcpinfo

log = logging.getLogger(__name__)

INTERVAL = 0.25  # seconds between samples: a subprocess each (~2 ms of CPU), so fewer than in-process
_ADDRESS_LINE = re.compile(r"^\s*\d+\s+\d+\s+(\S+)\s+(\S+)")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)([KMG]?)bps$")
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
# ss "name:value" -> (tcpinfo field, scale to tcpinfo's unit); ms values become µs
_FIELDS = {"minrtt": ("min_rtt", 1000), "cwnd": ("snd_cwnd", 1), "mss": ("snd_mss", 1), "lost": ("lost", 1),
           "bytes_retrans": ("bytes_retrans", 1), "reord_seen": ("reord_seen", 1),
           "rcv_ooopack": ("rcv_ooopack", 1), "data_segs_out": ("data_segs_out", 1),
           "data_segs_in": ("data_segs_in", 1), "unacked": ("unacked", 1)}
# ss "busy:612ms rwnd_limited:140ms(22.9%) sndbuf_limited:..." -> tcpinfo's µs fields (ms resolution)
_CHRONO = {"busy": "busy_time", "rwnd_limited": "rwnd_limited", "sndbuf_limited": "sndbuf_limited"}
_ZERO_WHEN_ABSENT = ("total_retrans", "lost", "bytes_retrans", "reord_seen", "rcv_ooopack")


def _rate(token: str) -> int | None:
    m = _RATE.match(token)
    return int(float(m.group(1)) * _SCALE[m.group(2)] / 8) if m else None  # tcpinfo keeps bytes/s


def parse_info(line: str) -> tuple[dict[str, Any], str | None]:
    """One ss info line as tcpinfo fields, and its congestion-control algorithm (the line's first word)."""
    tokens = line.split()
    out: dict[str, Any] = dict.fromkeys(_ZERO_WHEN_ABSENT, 0)
    congestion = tokens[0] if tokens and re.fullmatch(r"[a-z0-9_]+", tokens[0]) else None
    for i, tok in enumerate(tokens):
        name, _, value = tok.partition(":")
        try:
            if name == "rtt" and value:
                srtt, _, var = value.partition("/")
                out["rtt"], out["rttvar"] = int(float(srtt) * 1000), int(float(var or 0) * 1000)
            elif name == "retrans" and value:
                out["total_retrans"] = int(value.partition("/")[2] or value)
            elif name in _FIELDS and value:
                field, scale = _FIELDS[name]
                out[field] = int(float(value) * scale)
            elif tok in ("delivery_rate", "pacing_rate") and i + 1 < len(tokens):
                out[tok] = _rate(tokens[i + 1])
            elif name in _CHRONO and value:  # busy:612ms rwnd_limited:140ms(22.9%): the sender's chrono stats
                out[_CHRONO[name]] = int(float(value.partition("ms")[0]) * 1000)
                if name == "busy":  # ss leaves out a limited time of 0, so with busy they are known
                    out.setdefault("rwnd_limited", 0)
                    out.setdefault("sndbuf_limited", 0)
        except ValueError:
            continue  # a field this ss prints differently: left out, the rest still counts
    return out, congestion


def parse(text: str) -> dict[str, tuple[dict[str, Any], str | None]]:
    """``ss -tinH state established`` output: "local peer" -> (fields, algorithm), one entry per connection."""
    found: dict[str, tuple[dict[str, Any], str | None]] = {}
    key: str | None = None
    for line in text.splitlines():
        m = _ADDRESS_LINE.match(line)
        if m and not line.startswith(("\t", " " * 8)):
            key = f"{m.group(1)} {m.group(2)}"
        elif key is not None and line.strip():
            found[key] = parse_info(line)
            key = None
    return found


class PeerSockets:
    """Samples the established connections to one peer while a test runs; ``stop()`` gives their combined
    summary (None when ss is missing or saw nothing)."""

    def __init__(self, peer: str, interval: float = INTERVAL) -> None:
        self.peer = peer
        self.interval = interval
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.congestion: dict[str, str | None] = {}
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._ss = shutil.which("ss")

    def _filter(self) -> list[str]:
        try:
            host = f"[{self.peer}]" if ipaddress.ip_address(self.peer).version == 6 else self.peer
        except ValueError:
            host = self.peer
        return ["state", "established", "dst", host]

    async def sample(self) -> None:
        if self._ss is None:
            return
        proc = await asyncio.create_subprocess_exec(self._ss, "-tinH", *self._filter(),
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        for key, (fields, algo) in parse(out.decode(errors="replace")).items():
            self.samples.setdefault(key, []).append(fields)
            self.congestion[key] = algo

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.sample()
            except OSError as e:
                log.info("Sampling the sockets to %s with ss failed: %s", self.peer, e)
                return
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval)
            except TimeoutError:
                pass

    def start(self) -> PeerSockets:
        if self._ss is None:
            log.info("ss (iproute2) is not installed: no kernel view of the protocol's sockets")
        else:
            self._task = asyncio.create_task(self._loop())
        return self

    async def stop(self) -> dict[str, Any] | None:
        if self._task is not None:
            # the sample under way ends first (cancelled, its ss process would outlive the wait)
            self._stopping.set()
            await self._task
        return tcpinfo.combine(tcpinfo.summarize(s, self.congestion.get(k)) for k, s in self.samples.items())
