"""One peer's period of test packets -> its summary (pure: no I/O, no clock).

Definitions (times are the four TWAMP timestamps: T1 sender sends, T2 reflector receives, T3 reflector sends,
T4 sender receives):

- **lost**: packets sent in the period whose reply had not arrived when the period was closed (round trip: a
  packet lost on the way out or its reply lost on the way back);
- **duplicates**: replies beyond the first for one sender sequence number;
- **reordered** (RFC 4737 3.3): first replies whose sequence number is below one that arrived before them;
- **RTT** = (T4 - T1) - (T3 - T2): the reflector's own time is taken out;
- **one-way delay**: forward T2 - T1, backward T4 - T3; true only when both clocks are synchronised, so it is
  marked trusted only when the local clock and the reflector's error estimate together are within the bound;
- **IPDV** (RFC 3393): the difference of the one-way delays of packets with consecutive sequence numbers, both
  received (its selection function); the clocks' offset cancels, so IPDV needs no synchronised clocks. Jitter is
  given as the mean, the median and the 95th percentile of |IPDV|, per direction and for the round trip.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Reply:
    """A reflected packet as the sender received it (times in seconds, any common epoch per clock)."""

    sequence: int  # the sender's sequence number, echoed
    t1: float
    t2: float
    t3: float
    t4: float
    reflector_error_s: float = math.inf  # the reflector's error estimate (inf: unknown)
    reflector_synchronized: bool = False
    ttl: int = 255


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def _stats(values: list[float], *, full: bool) -> dict | None:
    if not values:
        return None
    values = sorted(values)
    out = {"min": _ms(values[0]), "median": _ms(statistics.median(values))}
    if full:
        out |= {"p95": _ms(percentile(values, 95)), "max": _ms(values[-1])}
    return out


def _ipdv(delays: Mapping[int, float]) -> dict | None:
    diffs = sorted(abs(delays[s + 1] - delays[s]) for s in delays if s + 1 in delays)
    if not diffs:
        return None
    return {"mean_abs": _ms(statistics.fmean(diffs)), "median_abs": _ms(statistics.median(diffs)),
            "p95_abs": _ms(percentile(diffs, 95)), "pairs": len(diffs)}


def summarize(sent: Iterable[int], replies: Iterable[Reply], *, local_synchronized: bool, local_error_s: float,
              max_error_s: float) -> dict:
    """The summary of a period: ``sent`` are the sequence numbers sent in it, ``replies`` every reply received for
    them in arrival order (replies to other sequence numbers are counted as ``unexpected`` and otherwise
    ignored). ``max_error_s``: the largest sum of both clocks' errors at which one-way delays are trusted."""
    sent_set = set(sent)
    first: dict[int, Reply] = {}
    duplicates = reordered = unexpected = 0
    highest = -1
    for r in replies:
        if r.sequence not in sent_set:
            unexpected += 1
            continue
        if r.sequence in first:
            duplicates += 1
            continue
        first[r.sequence] = r
        if r.sequence < highest:
            reordered += 1
        else:
            highest = r.sequence
    received = list(first.values())
    n_sent = len(sent_set)
    lost = n_sent - len(received)
    rtt = [(r.t4 - r.t1) - (r.t3 - r.t2) for r in received]
    forward = {r.sequence: r.t2 - r.t1 for r in received}
    backward = {r.sequence: r.t4 - r.t3 for r in received}
    round_trip = dict(zip(first.keys(), rtt, strict=True))
    remote_error = max((r.reflector_error_s for r in received), default=math.inf)
    remote_synced = bool(received) and all(r.reflector_synchronized for r in received)
    error = local_error_s + remote_error
    trusted = local_synchronized and remote_synced and error <= max_error_s
    if not received:
        why = "no replies"
    elif not local_synchronized:
        why = "the local clock is not synchronised"
    elif not remote_synced:
        why = "the reflector's clock is not synchronised"
    elif not trusted:
        why = f"the clocks' error estimate {error * 1000:.3g} ms is above the bound {max_error_s * 1000:.3g} ms"
    else:
        why = None
    return {
        "sent": n_sent,
        "received": len(received),
        "lost": lost,
        "loss_percent": round(100 * lost / n_sent, 6) if n_sent else None,
        "duplicates": duplicates,
        "reordered": reordered,
        "unexpected": unexpected,
        "rtt_ms": _stats(rtt, full=True),
        "one_way_ms": {
            "forward": _stats(list(forward.values()), full=False),
            "backward": _stats(list(backward.values()), full=False),
            "trusted": trusted,
            "untrusted_reason": why,
            "clock_error_ms": _ms(error) if math.isfinite(error) else None,
        },
        "ipdv_ms": {"forward": _ipdv(forward), "backward": _ipdv(backward), "round_trip": _ipdv(round_trip)},
        "ttl_min": min((r.ttl for r in received), default=None),
    }
