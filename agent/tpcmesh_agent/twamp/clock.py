"""The local clock's synchronisation state from the kernel's NTP discipline: ``adjtimex(2)`` read-only
(``modes = 0``, no privileges needed).

No maintained Python library wraps adjtimex (ntplib asks an NTP server over the network, which says nothing about
this kernel's clock), so this is a small ctypes binding of ``struct timex`` (Linux, <sys/timex.h>). chrony, ntpd
and systemd-timesyncd all discipline the kernel clock through it and keep ``esterror`` (the estimated error, µs)
and the ``STA_UNSYNC`` status bit up to date; the return value ``TIME_ERROR`` (5) means unsynchronised.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

TIME_ERROR = 5
STA_UNSYNC = 0x0040


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timex(ctypes.Structure):
    """struct timex (Linux): ctypes lays the fields out with the platform's alignment, like the C compiler."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


@dataclass(frozen=True)
class ClockState:
    synchronized: bool
    esterror_s: float  # the kernel's estimated error of the clock, seconds
    maxerror_s: float
    source: str  # "adjtimex", or why the state is unknown

    def as_dict(self) -> dict:
        def finite(x: float) -> float | None:  # JSON has no infinity
            return x if x != float("inf") else None

        return {"synchronized": self.synchronized, "esterror_s": finite(self.esterror_s),
                "maxerror_s": finite(self.maxerror_s), "source": self.source}


UNKNOWN = ClockState(False, float("inf"), float("inf"), "unknown")


def interpret(ret: int, status: int, esterror_us: int, maxerror_us: int) -> ClockState:
    """The state from adjtimex's return value and fields (pure, for the tests)."""
    synced = ret != TIME_ERROR and not status & STA_UNSYNC
    return ClockState(synced, esterror_us / 1e6, maxerror_us / 1e6, "adjtimex")


_libc: ctypes.CDLL | None = None


def read_clock() -> ClockState:
    """The clock's state now (UNKNOWN with the reason when adjtimex cannot be called)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        tx = Timex()
        ret = _libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError) as e:
        return ClockState(False, float("inf"), float("inf"), f"adjtimex unavailable: {e}")
    if ret < 0:
        return ClockState(False, float("inf"), float("inf"), f"adjtimex failed: errno {ctypes.get_errno()}")
    return interpret(ret, tx.status, tx.esterror, tx.maxerror)
