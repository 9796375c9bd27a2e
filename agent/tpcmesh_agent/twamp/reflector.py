"""The TWAMP-light Session-Reflector (RFC 5357 Appendix I): answers each allowed sender packet at once.

Stateful per sender (address and port): its own sequence number counts the packets it reflected to that sender
(RFC 5357 4.2.1), at most ``MAX_SESSIONS`` senders remembered (the oldest forgotten first). Packets from an address
that is not allowed, malformed packets and packets too short to be answered without a larger reply are dropped and
counted, never answered. The reply carries the request's DSCP when the kernel lets a send set it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable

from . import codec, udp
from .clock import ClockState, read_clock

log = logging.getLogger(__name__)
MAX_SESSIONS = 65_536
READ_BURST = 256
CLOCK_REFRESH_S = 1.0


def canonical(address: str) -> str:
    """An IP address written one way (IPv4-mapped IPv6 as IPv4, scope ids dropped)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class Reflector:
    def __init__(self, address: str, port: int, allowed: Callable[[str], bool],
                 clock: Callable[[], ClockState] = read_clock) -> None:
        self.address = address
        self.port = port
        self.allowed = allowed
        self._clock = clock
        self._error = codec.UNKNOWN_ERROR
        self._error_at = -1.0
        self.sock: socket.socket | None = None
        self.sessions: OrderedDict[tuple, int] = OrderedDict()
        self.counters = {"received": 0, "reflected": 0, "not_allowed": 0, "malformed": 0, "too_short": 0,
                         "send_errors": 0}
        self._tos_cmsg = True

    def start(self) -> None:
        self.sock = udp.open_socket(self.address, self.port)
        self.port = self.sock.getsockname()[1]
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)
        log.info("Started TWAMP-light reflector on %s port %d", self.address, self.port)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None

    def error_estimate(self) -> codec.ErrorEstimate:
        now = time.monotonic()
        if now - self._error_at > CLOCK_REFRESH_S:
            state = self._clock()
            self._error = codec.ErrorEstimate.from_seconds(state.esterror_s, state.synchronized) \
                if state.esterror_s != float("inf") else codec.UNKNOWN_ERROR
            self._error_at = now
        return self._error

    def _readable(self) -> None:
        assert self.sock is not None
        udp.drain(self.sock, self.handle, READ_BURST)

    def handle(self, dgram: udp.Datagram) -> None:
        c = self.counters
        c["received"] += 1
        try:
            allowed = self.allowed(canonical(dgram.address[0]))
        except ValueError:
            allowed = False
        if not allowed:
            c["not_allowed"] += 1
            return
        request = codec.parse_counted(codec.parse_sender, dgram.data, c)
        if request is None:
            return
        if len(dgram.data) < codec.REFLECTOR_HEADER:
            c["too_short"] += 1
            return
        key = dgram.address[:2]
        sequence = self.sessions.pop(key, 0)
        self.sessions[key] = (sequence + 1) & 0xFFFFFFFF
        if len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        reply = codec.reflect(request, len(dgram.data), sequence=sequence,
                              receive_timestamp=codec.to_ntp_ns(dgram.time_ns),
                              timestamp=codec.to_ntp_ns(time.time_ns()), error=self.error_estimate(),
                              ttl=dgram.ttl)
        self._send(reply, dgram)

    def _send(self, reply: bytes, dgram: udp.Datagram) -> None:
        assert self.sock is not None
        try:
            if self._tos_cmsg and dgram.tos:
                level, kind = ((socket.IPPROTO_IPV6, udp.IPV6_TCLASS) if self.sock.family == socket.AF_INET6
                               else (socket.IPPROTO_IP, socket.IP_TOS))
                try:
                    self.sock.sendmsg([reply], [(level, kind, struct.pack("@i", dgram.tos & 0xFC))],
                                      0, dgram.address)
                except OSError as e:
                    if e.errno not in (22, 95):  # EINVAL, EOPNOTSUPP: this kernel sets no TOS per send
                        raise
                    self._tos_cmsg = False
                    self.sock.sendto(reply, dgram.address)
            else:
                self.sock.sendto(reply, dgram.address)
        except OSError:
            self.counters["send_errors"] += 1
            return
        self.counters["reflected"] += 1
