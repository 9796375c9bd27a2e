"""The TWAMP-light Session-Sender: a steady stream of test packets to each peer, its replies matched, and one
summary per peer and period.

One socket per address family sends to every peer (replies are told apart by the peer's address and port). Each
peer's packets go out every 1/rate seconds, the peers' phases spread over the interval. Periods are aligned to the
wall clock (whole minutes for 60 s); a period's packets are summarised ``loss_timeout_s`` after it ends, so a reply
later than that counts as lost (and as ``late`` when it comes).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import codec, udp
from .clock import ClockState, read_clock
from .reflector import canonical
from .summary import Reply, summarize

log = logging.getLogger(__name__)
DEFAULT_PORT = 863  # RFC 8545: the well-known port of a TWAMP-light Session-Reflector
READ_BURST = 256
BATCH_S = 0.001  # packets due this close together are sent at one wake-up
HOUSEKEEPING_S = 0.1  # new peers start and periods close at least this often
CLOCK_STEP_S = 0.1  # the wall clock moved this far against the monotonic one: it was stepped, follow it


def wall_minus_monotonic() -> float:
    """``time.time() - time.monotonic()`` from the tightest of three bracketed reads: a process preempted between
    two reads would otherwise see the wall clock milliseconds ahead."""
    best = (math.inf, 0.0)
    for _ in range(3):
        m1 = time.monotonic()
        wall = time.time()
        m2 = time.monotonic()
        best = min(best, (m2 - m1, wall - (m1 + m2) / 2))
    return best[1]


@dataclass(frozen=True)
class ProbeConfig:
    rate_pps: float = 10.0
    padding: int = codec.MIN_SENDER_PADDING  # bytes after the 14-byte header; 27 lets a reply be as large
    dscp: int = 0
    period_s: float = 60.0
    loss_timeout_s: float = 5.0  # a reply later than this after its period's end counts as lost
    max_clock_error_s: float = 0.001  # one-way delays are trusted when both clocks' errors add up to at most this

    def validate(self) -> ProbeConfig:
        if not 0.01 <= self.rate_pps <= 10_000:
            raise ValueError(f"rate_pps {self.rate_pps} is outside 0.01..10000")
        if not codec.MIN_SENDER_PADDING <= self.padding <= 9_000 - codec.SENDER_HEADER:
            raise ValueError(f"padding {self.padding} is outside {codec.MIN_SENDER_PADDING}..{9_000 - 14} (a "
                             "request shorter than 41 bytes cannot be reflected)")
        if not 0 <= self.dscp <= 63:
            raise ValueError(f"dscp {self.dscp} is outside 0..63")
        if not 1 <= self.period_s <= 3600:
            raise ValueError(f"period_s {self.period_s} is outside 1..3600")
        if not 0.1 <= self.loss_timeout_s <= self.period_s:
            raise ValueError(f"loss_timeout_s {self.loss_timeout_s} is outside 0.1..period_s")
        if not self.max_clock_error_s > 0:
            raise ValueError("max_clock_error_s must be > 0")
        return self

    @property
    def packet_bytes(self) -> int:
        return codec.SENDER_HEADER + self.padding


@dataclass(frozen=True)
class Peer:
    name: str
    address: str
    port: int = DEFAULT_PORT

    @property
    def key(self) -> tuple[str, int]:
        return canonical(self.address), self.port


@dataclass
class _Bucket:
    start: float  # wall clock: the period's start
    end: float
    first_seq: int
    opened: float  # wall clock: when the first packet could go
    sent: dict[int, int] = field(default_factory=dict)  # sequence -> T1 (Unix ns)
    replies: list[Reply] = field(default_factory=list)
    send_errors: int = 0
    mismatched: int = 0


@dataclass
class _PeerState:
    peer: Peer
    sequence: int = 0
    current: _Bucket | None = None
    closing: list[_Bucket] = field(default_factory=list)
    late: int = 0

    def bucket_of(self, seq: int) -> _Bucket | None:
        for b in (self.current, *self.closing):
            if b is not None and seq in b.sent:
                return b
        return None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Sender:
    def __init__(self, addresses: Iterable[str], config: ProbeConfig, on_summary: Callable[[dict], None],
                 *, node: str = "", clock: Callable[[], ClockState] = read_clock) -> None:
        self.addresses = {udp.family_of(a): a for a in addresses}
        self.config = config.validate()
        self.on_summary = on_summary
        self.node = node
        self._clock = clock
        self.sockets: dict[int, socket.socket] = {}
        self.peers: dict[tuple[str, int], _PeerState] = {}
        self.counters = {"sent": 0, "replies": 0, "malformed": 0, "unknown_source": 0, "late": 0,
                         "send_errors": 0, "no_socket": 0}
        self._task: asyncio.Task | None = None
        self._changed = False
        self._fill = os.urandom(self.config.padding)  # pseudo-random padding (RFC 4656 4.1.2), drawn once
        self._error = codec.UNKNOWN_ERROR
        self._state: ClockState | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for family, address in self.addresses.items():
            sock = udp.open_socket(address, 0, self.config.dscp)
            self.sockets[family] = sock
            loop.add_reader(sock.fileno(), self._readable, sock)
        self._task = asyncio.create_task(self._run(), name="twamp-sender")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        loop = asyncio.get_running_loop()
        for sock in self.sockets.values():
            with contextlib.suppress(Exception):
                loop.remove_reader(sock.fileno())
            sock.close()
        self.sockets.clear()

    def set_peers(self, peers: Iterable[Peer]) -> None:
        """Probe exactly these peers from now on: new ones start, gone ones stop (their open periods are
        dropped), the others keep their sequence numbers and periods."""
        wanted = {p.key: p for p in peers}
        for key in list(self.peers):
            if key not in wanted:
                del self.peers[key]
        for key, peer in wanted.items():
            if key in self.peers:
                self.peers[key].peer = peer
            else:
                self.peers[key] = _PeerState(peer)
        self._changed = True

    def set_config(self, config: ProbeConfig) -> None:
        """A new rate, padding, DSCP or period: the open periods are closed as they are, new ones start."""
        old, self.config = self.config, config.validate()
        if config.padding != old.padding:
            self._fill = os.urandom(config.padding)
        if config.dscp != old.dscp:
            for sock in self.sockets.values():
                udp.set_dscp(sock, config.dscp)
        now = time.time()
        for st in self.peers.values():
            if st.current is not None:
                st.current.end = now
                st.closing.append(st.current)
                st.current = None
        self._changed = True

    # ---- sending -------------------------------------------------------------------------------------------
    def _clock_state(self) -> ClockState:
        if self._state is None:
            self._refresh_clock()
        assert self._state is not None
        return self._state

    def _refresh_clock(self) -> None:
        self._state = self._clock()
        self._error = (codec.ErrorEstimate.from_seconds(self._state.esterror_s, self._state.synchronized)
                       if math.isfinite(self._state.esterror_s) else codec.UNKNOWN_ERROR)

    async def _run(self) -> None:
        """Send on schedule (the packets due within BATCH_S go together), open and close periods and summarise
        closed ones after the loss timeout (checked at every period boundary and every HOUSEKEEPING_S)."""
        heap: list[tuple[float, tuple[str, int]]] = []
        scheduled: set[tuple[str, int]] = set()
        last_clock = housekeeping = boundary = 0.0
        # One wall-clock reading of the monotonic schedule for every packet: read afresh at each wake-up, a
        # preemption between the two reads would move a packet due just before a period's end into the next
        # period (a full period of 49 and one of 51 at 50/s). Followed only when the wall clock is stepped.
        offset = wall_minus_monotonic()
        while True:
            mono = time.monotonic()
            wall = mono + offset
            interval = 1.0 / self.config.rate_pps
            if mono >= housekeeping or wall >= boundary or self._changed:
                self._changed = False
                if mono - last_clock > 1.0:
                    self._refresh_clock()
                    last_clock = mono
                    now_offset = wall_minus_monotonic()
                    if abs(now_offset - offset) > CLOCK_STEP_S:
                        log.info("The wall clock moved %.3f s: the probes' periods follow it", now_offset - offset)
                        offset = now_offset
                        wall = mono + offset
                new = [k for k in self.peers if k not in scheduled]
                for i, key in enumerate(new):  # spread the new peers' phases over one interval
                    heapq.heappush(heap, (mono + interval * (i + 1) / (len(new) + 1), key))
                    scheduled.add(key)
                self._periods(wall)
                period = self.config.period_s
                boundary = (math.floor(wall / period) + 1) * period
                housekeeping = mono + HOUSEKEEPING_S
            while heap and heap[0][0] <= mono + BATCH_S:
                due, key = heapq.heappop(heap)
                st = self.peers.get(key)
                if st is None:
                    scheduled.discard(key)
                    continue
                self._send_due(st, due + offset)
                nxt = due + interval
                if nxt < mono - 10 * interval:  # far behind (a stalled loop): skip ahead, do not burst
                    nxt = mono + interval
                heapq.heappush(heap, (nxt, key))
            wake = min(heap[0][0] if heap else mono + HOUSEKEEPING_S, housekeeping,
                       boundary - offset)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))

    def _periods(self, now: float) -> None:
        period = self.config.period_s
        for st in self.peers.values():
            b = st.current
            if b is not None and now >= b.end:
                st.closing.append(b)
                st.current = None
            if st.current is None:
                start = math.floor(now / period) * period
                st.current = _Bucket(start=start, end=start + period, first_seq=st.sequence, opened=now)
            while st.closing and now >= st.closing[0].end + self.config.loss_timeout_s:
                self._finish(st, st.closing.pop(0))

    def _send_due(self, st: _PeerState, due_wall: float) -> None:
        """Send the packet due at wall-clock ``due_wall`` and count it in the period it is due in, not the one
        it leaves in: sent up to BATCH_S early, or a wake-up late after the loop closed its period, it would
        otherwise make a full period 51 or 49 packets at 50 per second."""
        if st.current is not None and due_wall >= st.current.end:
            self._periods(due_wall)
        b = st.current
        if b is None:
            return
        if due_wall < b.start and st.closing and st.closing[-1].start <= due_wall:
            b = st.closing[-1]
        family = udp.family_of(st.peer.key[0])
        sock = self.sockets.get(family)
        if sock is None:
            self.counters["no_socket"] += 1
            return
        seq = st.sequence
        st.sequence = (seq + 1) & 0xFFFFFFFF
        t1 = time.time_ns()
        packet = codec.build_sender(seq, codec.to_ntp_ns(t1), self._error, self._fill)
        b.sent[seq] = t1
        try:
            sock.sendto(packet, (st.peer.key[0], st.peer.port))
        except OSError:
            b.send_errors += 1  # counted as sent and, with no reply, lost: the path is broken from here
            self.counters["send_errors"] += 1
        self.counters["sent"] += 1

    # ---- receiving -----------------------------------------------------------------------------------------
    def _readable(self, sock: socket.socket) -> None:
        udp.drain(sock, self.handle, READ_BURST)

    def handle(self, dgram: udp.Datagram) -> None:
        c = self.counters
        try:
            key = (canonical(dgram.address[0]), dgram.address[1])
        except ValueError:
            c["unknown_source"] += 1
            return
        st = self.peers.get(key)
        if st is None:
            c["unknown_source"] += 1
            return
        pkt = codec.parse_counted(codec.parse_reflector, dgram.data, c)
        if pkt is None:
            return
        seq = pkt.sender_sequence
        b = st.bucket_of(seq)
        if b is None:
            st.late += 1
            c["late"] += 1
            return
        t1 = b.sent[seq]
        if codec.to_ntp_ns(t1) != pkt.sender_timestamp:  # not the packet we sent (an older session's)
            b.mismatched += 1
            return
        c["replies"] += 1
        b.replies.append(Reply(sequence=seq, t1=t1 / 1e9, t2=codec.from_ntp(pkt.receive_timestamp),
                               t3=codec.from_ntp(pkt.timestamp), t4=dgram.time_ns / 1e9,
                               reflector_error_s=pkt.error.seconds, reflector_synchronized=pkt.error.synchronized,
                               ttl=pkt.sender_ttl))

    def _finish(self, st: _PeerState, b: _Bucket) -> None:
        if not b.sent:
            return
        state = self._clock_state()
        cfg = self.config
        summary = summarize(b.sent, b.replies, local_synchronized=state.synchronized,
                            local_error_s=state.esterror_s, max_error_s=cfg.max_clock_error_s)
        record = {
            "node": self.node, "peer": st.peer.name, "peer_address": st.peer.key[0], "peer_port": st.peer.port,
            "family": 6 if ":" in st.peer.key[0] else 4,
            "period_start": _iso(b.start), "period_end": _iso(b.end), "period_s": round(b.end - b.start, 3),
            "partial": b.opened > b.start + 1.0 / cfg.rate_pps or b.end - b.start < cfg.period_s - 1e-6,
            "rate_pps": cfg.rate_pps, "packet_bytes": cfg.packet_bytes, "dscp": cfg.dscp,
            "send_errors": b.send_errors, "mismatched": b.mismatched,
            **summary,
            "clock": state.as_dict(),
        }
        try:
            self.on_summary(record)
        except Exception:  # a failing consumer must not stop the probes
            log.exception("Summary consumer failed for peer %s", st.peer.name)
