"""TCP congestion control as a test setting: which algorithms this kernel has, and setting one on a socket.

``available`` are the algorithms loaded in the kernel, ``allowed`` those an unprivileged process may pick (a process
with CAP_NET_ADMIN may pick any available one), ``default`` the one new sockets get. A test asks for one by name
(``congestion_control``); whether this process may use it is checked on a throwaway socket, so the answer is the
kernel's own."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

PROC = Path("/proc/sys/net/ipv4")
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
NAME_RE = re.compile(r"^[a-z0-9_]{1,15}$")  # TCP_CA_NAME_MAX is 16 with the NUL
PROTOCOLS = ("builtin", "iperf3")  # movers that set it on their sockets; XRootD and GridFTP choose their own
HEADER = "X-Tpcmesh-Congestion"  # a built-in GET asks the source to send with this algorithm


def _words(name: str, proc: Path) -> list[str]:
    try:
        return (proc / name).read_text().split()
    except OSError:
        return []


def kernel_algorithms(proc: Path = PROC) -> dict[str, Any]:
    """{"default", "available", "allowed"} as this kernel reports them (empty where /proc does not say)."""
    default = _words("tcp_congestion_control", proc)
    return {"default": default[0] if default else None,
            "available": _words("tcp_available_congestion_control", proc),
            "allowed": _words("tcp_allowed_congestion_control", proc)}


def apply(sock: socket.socket, name: str) -> None:
    """Set ``name`` on ``sock``; OSError when this kernel or this process may not use it."""
    sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, name.encode())


def problem(name: object) -> str | None:
    """Why this process cannot send with ``name`` (None when it can), naming what the kernel offers."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return f"congestion_control must be an algorithm name such as cubic or bbr, got {name!r}"
    with socket.socket() as s:
        try:
            apply(s, name)
        except OSError as e:
            k = kernel_algorithms()
            return (f"congestion control {name!r} is not usable on this node ({e.strerror or e}); available: "
                    f"{' '.join(k['available']) or 'unknown'}, allowed without CAP_NET_ADMIN: "
                    f"{' '.join(k['allowed']) or 'unknown'}")
    return None
