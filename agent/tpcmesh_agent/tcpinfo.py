"""The kernel's view of a TCP connection: ``struct tcp_info`` parsed, and samples of it summarised (pure, no I/O).

Why hand-written: Python's socket module returns TCP_INFO as raw bytes, and no maintained PyPI/Debian library parses
a getsockopt buffer (pyroute2 decodes tcp_info only inside inet_diag netlink answers). The layout below is the one
of the kernel's ``include/uapi/linux/tcp.h``; fields the running kernel does not return (an older, shorter struct)
read as None. Offsets were checked against ``offsetof`` with this machine's ``linux/tcp.h`` (6.x).

A connection's summary (``summarize``): every counter is the change from the first sample to the last (the
connection's own share), rates and cwnd the highest sampled, srtt the median of the samples:
- ``retransmits``: segments retransmitted (tcpi_total_retrans), ``bytes_retrans`` their bytes;
- ``lost_max``: the most segments the kernel held lost at one sample (tcpi_lost is a current count, not a total);
- ``reordering``: reordering events seen (tcpi_reord_seen); ``out_of_order``: out-of-order packets received
  (tcpi_rcv_ooopack, the receiver's sign of loss);
- ``min_rtt_ms`` (tcpi_min_rtt), ``srtt_ms`` (median of tcpi_rtt samples), ``srtt_max_ms``;
- ``cwnd_max_bytes``/``cwnd_last_bytes`` (tcpi_snd_cwnd * tcpi_snd_mss);
- ``delivery_rate_max_bps``, ``pacing_rate_max_bps`` in bit/s (the kernel reports bytes/s);
- ``data_segs_out``/``data_segs_in``: data segments sent/received, so retransmits can be read as a ratio;
- ``congestion``: the congestion-control algorithm (TCP_CONGESTION); ``samples``: how many samples;
- why the sender waited (the kernel's chrono stats, Linux 4.10+; a sender's figures, a receiver's busy time is
  about 0): ``busy_ms``, the time with data in flight (tcpi_busy_time), ``rwnd_limited_fraction`` the share of it
  spent stalled by the receiver's window (tcpi_rwnd_limited), ``sndbuf_limited_fraction`` by the sender's own
  socket buffer (tcpi_sndbuf_limited); null when the kernel does not give them or nothing was sent.
``combine`` merges several connections (a file's streams, a test's files): counters and rates summed, min RTT the
lowest, srtt and cwnd the highest, the algorithms listed once each, busy time summed and the limited fractions
weighted by each connection's busy time.
"""

from __future__ import annotations

import statistics
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# (name, struct code) in the order of include/uapi/linux/tcp.h; the first 8 bytes are u8s (two hold bit fields)
_LAYOUT: tuple[tuple[str, str], ...] = (
    ("state", "B"), ("ca_state", "B"), ("retransmits", "B"), ("probes", "B"), ("backoff", "B"), ("options", "B"),
    ("wscale", "B"), ("app_limited", "B"),
    ("rto", "I"), ("ato", "I"), ("snd_mss", "I"), ("rcv_mss", "I"),
    ("unacked", "I"), ("sacked", "I"), ("lost", "I"), ("retrans", "I"), ("fackets", "I"),
    ("last_data_sent", "I"), ("last_ack_sent", "I"), ("last_data_recv", "I"), ("last_ack_recv", "I"),
    ("pmtu", "I"), ("rcv_ssthresh", "I"), ("rtt", "I"), ("rttvar", "I"), ("snd_ssthresh", "I"), ("snd_cwnd", "I"),
    ("advmss", "I"), ("reordering", "I"), ("rcv_rtt", "I"), ("rcv_space", "I"), ("total_retrans", "I"),
    ("pacing_rate", "Q"), ("max_pacing_rate", "Q"), ("bytes_acked", "Q"), ("bytes_received", "Q"),
    ("segs_out", "I"), ("segs_in", "I"), ("notsent_bytes", "I"), ("min_rtt", "I"),
    ("data_segs_in", "I"), ("data_segs_out", "I"), ("delivery_rate", "Q"),
    ("busy_time", "Q"), ("rwnd_limited", "Q"), ("sndbuf_limited", "Q"), ("delivered", "I"), ("delivered_ce", "I"),
    ("bytes_sent", "Q"), ("bytes_retrans", "Q"), ("dsack_dups", "I"), ("reord_seen", "I"), ("rcv_ooopack", "I"),
    ("snd_wnd", "I"),
)
_FIELDS = tuple(name for name, _ in _LAYOUT)
_OFFSETS: dict[str, tuple[int, str]] = {}
_at = 0
for _name, _code in _LAYOUT:
    _OFFSETS[_name] = (_at, _code)
    _at += struct.calcsize("=" + _code)
SIZE = _at  # bytes to ask the kernel for (232 on 6.x: the fields above)
U64_UNLIMITED = (1 << 64) - 1  # pacing_rate when the kernel sets no pacing (~0ULL)


def parse(buf: bytes) -> dict[str, int | None]:
    """The fields of a TCP_INFO buffer by name (native byte order); those past the buffer's end are None."""
    out: dict[str, int | None] = {}
    for name in _FIELDS:
        at, code = _OFFSETS[name]
        size = struct.calcsize("=" + code)
        out[name] = struct.unpack_from("=" + code, buf, at)[0] if at + size <= len(buf) else None
    return out


def _delta(first: Mapping[str, Any], last: Mapping[str, Any], key: str) -> int | None:
    a, b = first.get(key), last.get(key)
    if a is None or b is None:
        return None
    if _OFFSETS[key][1] == "I":
        return (b - a) & 0xFFFFFFFF  # a u32 counter may wrap between two samples
    return max(0, b - a)


def _ms(us: int | None) -> float | None:
    return None if us is None or us == 0 else round(us / 1000, 3)


def _rate_bps(v: int | None) -> int | None:
    return None if v is None or v == U64_UNLIMITED else v * 8


def _cwnd_bytes(s: Mapping[str, Any]) -> int | None:
    if s.get("snd_cwnd") is None or s.get("snd_mss") is None:
        return None
    return int(s["snd_cwnd"]) * int(s["snd_mss"])


def _max(values: Iterable[int | float | None]) -> Any:
    got = [v for v in values if v is not None]
    return max(got) if got else None


def _fraction(part: int | None, busy: int | None) -> float | None:
    return None if part is None or not busy else round(min(1.0, part / busy), 4)


def summarize(samples: Sequence[Mapping[str, Any]], congestion: str | None = None) -> dict[str, Any] | None:
    """One connection's summary from its parsed samples in time order (None without samples)."""
    if not samples:
        return None
    first, last = samples[0], samples[-1]
    rtts = [s["rtt"] for s in samples if s.get("rtt")]
    busy = _delta(first, last, "busy_time")  # µs, as the rwnd and sndbuf limited times
    return {
        "retransmits": _delta(first, last, "total_retrans"),
        "bytes_retrans": _delta(first, last, "bytes_retrans"),
        "lost_max": _max(s.get("lost") for s in samples),
        "reordering": _delta(first, last, "reord_seen"),
        "out_of_order": _delta(first, last, "rcv_ooopack"),
        "min_rtt_ms": _ms(last.get("min_rtt")),
        "srtt_ms": _ms(int(statistics.median(rtts))) if rtts else None,
        "srtt_max_ms": _ms(max(rtts)) if rtts else None,
        "cwnd_max_bytes": _max(_cwnd_bytes(s) for s in samples),
        "cwnd_last_bytes": _cwnd_bytes(last),
        "delivery_rate_max_bps": _max(_rate_bps(s.get("delivery_rate")) for s in samples),
        "pacing_rate_max_bps": _max(_rate_bps(s.get("pacing_rate")) for s in samples),
        "data_segs_out": _delta(first, last, "data_segs_out"),
        "data_segs_in": _delta(first, last, "data_segs_in"),
        "congestion": [congestion] if congestion else [],
        "samples": len(samples),
        "connections": 1,
        "busy_ms": None if busy is None else round(busy / 1000, 3),
        "rwnd_limited_fraction": _fraction(_delta(first, last, "rwnd_limited"), busy),
        "sndbuf_limited_fraction": _fraction(_delta(first, last, "sndbuf_limited"), busy),
    }


# a file's row keeps these (the test keeps every figure): a record of 1000 files stays small enough for the
# operator's status budget (about 150 bytes a side instead of 450)
FILE_FIGURES = ("retransmits", "lost_max", "reordering", "out_of_order", "min_rtt_ms", "srtt_ms", "cwnd_max_bytes",
                "delivery_rate_max_bps", "connections", "busy_ms", "rwnd_limited_fraction", "sndbuf_limited_fraction")


def for_file(view: Mapping[str, Any]) -> dict[str, Any]:
    """A file's {"sender", "receiver"} view with each side cut to FILE_FIGURES, unknown figures left out."""
    return {side: None if not s else {k: s[k] for k in FILE_FIGURES if s.get(k) is not None}
            for side, s in view.items()}


def sender_only(**figures: Any) -> dict[str, Any]:
    """A summary in the same shape from figures a tool reported itself (iperf3): the rest None."""
    blank = dict.fromkeys(summarize([{}]) or {}, None)
    blank.update(congestion=[], samples=None, connections=None)
    blank.update({k: v for k, v in figures.items() if v is not None})
    return blank


_SUMMED = ("retransmits", "bytes_retrans", "reordering", "out_of_order", "data_segs_out", "data_segs_in",
           "delivery_rate_max_bps", "pacing_rate_max_bps", "samples", "connections", "lost_max")
_HIGHEST = ("srtt_ms", "srtt_max_ms", "cwnd_max_bytes", "cwnd_last_bytes")


def combine(summaries: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Several connections' summaries as one (see the module's docstring); None when there is none."""
    parts = [s for s in summaries if s]
    if not parts:
        return None
    out: dict[str, Any] = {}
    for key in _SUMMED:
        got = [p[key] for p in parts if p.get(key) is not None]
        out[key] = sum(got) if got else None
    for key in _HIGHEST:
        out[key] = _max(p.get(key) for p in parts)
    lows = [p["min_rtt_ms"] for p in parts if p.get("min_rtt_ms") is not None]
    out["min_rtt_ms"] = min(lows) if lows else None
    out["congestion"] = sorted({c for p in parts for c in p.get("congestion") or []})
    busy = [p for p in parts if p.get("busy_ms") is not None]
    out["busy_ms"] = round(sum(p["busy_ms"] for p in busy), 3) if busy else None
    for key in ("rwnd_limited_fraction", "sndbuf_limited_fraction"):
        weighted = [(p[key], p["busy_ms"]) for p in busy if p.get(key) is not None]
        total = sum(b for _, b in weighted)
        out[key] = round(sum(f * b for f, b in weighted) / total, 4) if total else None
    return out
