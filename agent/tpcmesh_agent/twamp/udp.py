"""UDP sockets for the probes: kernel receive timestamps (SO_TIMESTAMPNS), the received TTL / hop limit and
traffic class, and sends with a chosen DSCP. asyncio's datagram transports hand out no ancillary data, so the
endpoints read with ``recvmsg`` from ``loop.add_reader``."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS has the same number
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL_CMSG = socket.IP_TTL  # 2
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IPV6_RECVHOPLIMIT = getattr(socket, "IPV6_RECVHOPLIMIT", 51)
IPV6_HOPLIMIT = getattr(socket, "IPV6_HOPLIMIT", 52)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
ANCILLARY = socket.CMSG_SPACE(16) + 2 * socket.CMSG_SPACE(4) + 64
RECEIVE_BUFFER = 4 * 2**20  # bursts of replies from 100 peers must not overflow the socket


@dataclass(frozen=True)
class Datagram:
    data: bytes
    address: tuple  # (host, port[, flowinfo, scope])
    time_ns: int  # the kernel's receive time (Unix ns), or the time read when the kernel gave none
    ttl: int  # the received TTL / hop limit (255 when unknown)
    tos: int  # the received traffic class byte (DSCP << 2 | ECN)


def family_of(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def open_socket(address: str, port: int, dscp: int = 0) -> socket.socket:
    """A non-blocking UDP socket bound to ``address``:``port`` (0: any free port) that reports receive times,
    TTLs and traffic classes, and sends with ``dscp``."""
    family = family_of(address)
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1)
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
        else:
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        set_dscp(sock, dscp)
        sock.bind((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


def set_dscp(sock: socket.socket, dscp: int) -> None:
    if not 0 <= dscp <= 63:
        raise ValueError(f"dscp {dscp} is outside 0..63")
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, dscp << 2)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


def receive(sock: socket.socket, size: int = 65_536) -> Datagram | None:
    """One datagram, or None when none is waiting."""
    try:
        data, ancdata, _flags, address = sock.recvmsg(size, ANCILLARY)
    except (BlockingIOError, InterruptedError):
        return None
    stamp = 0
    ttl = 255
    tos = 0
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            sec, nsec = struct.unpack_from("@ll", payload)
            stamp = sec * 1_000_000_000 + nsec
        elif (level, kind) in ((socket.IPPROTO_IP, IP_TTL_CMSG), (socket.IPPROTO_IPV6, IPV6_HOPLIMIT)):
            ttl = struct.unpack_from("@i", payload)[0] if len(payload) >= 4 else payload[0]
        elif level == socket.IPPROTO_IP and kind == socket.IP_TOS and payload:
            tos = payload[0]
        elif level == socket.IPPROTO_IPV6 and kind == IPV6_TCLASS and len(payload) >= 4:
            tos = struct.unpack_from("@i", payload)[0]
    return Datagram(data, address, stamp or time.time_ns(), ttl, tos)


def drain(sock: socket.socket, handle: Callable[[Datagram], None], burst: int = 256) -> None:
    """Hand up to ``burst`` waiting datagrams to ``handle`` (a reader callback: then back to the event loop)."""
    for _ in range(burst):
        dgram = receive(sock)
        if dgram is None:
            return
        handle(dgram)
