"""The contract's transferRecord, built once from a mover's FileResults (statistics live here, nowhere else).

Units: bytes, seconds, SI Gbit/s (1e9 bit/s).
- throughput_gbps = total_bytes * 8 / 1e9 / mean single-file transfer seconds (the 003 paper's definition);
- aggregate_gbps  = total_bytes * 8 / 1e9 / wall seconds: from the test's start until the last byte arrived (the
  last file's end; checksum verification and clean-up after it are not data movement and do not count);
- peak_gbps       = the highest rate over any window of at least ``PEAK_WINDOW`` seconds of the cumulative byte
  samples (the movers' progress counters), or of a file's own peak (its growth, iperf3's intervals) when higher.
  When the counters move only as whole files end (``Progress.end_only``: iperf3, the GridFTP sink) they are not
  used: one end-jump in a 1 s window would read as all the bytes in that second; each file's bytes are spread
  over its transfer time instead (``spread_samples``), a lower bound on the true peak.
- tcp (when the mover has a TCP view): per file ``{"sender", "receiver"}`` summaries (tcpinfo.py, the main figures
  only: tcpinfo.for_file); for the test
  the same two combined over its files, ``retransmits`` (the senders' total: only a sender retransmits; None when
  no sender view came) and ``srtt_median_ms`` (the median of the files' smoothed RTT, the sender's when known).
  Movers without a view of their own (XRootD, GridFTP) get the receiver side of the test from ss (ssview.py).
- host (when the agent keeps host telemetry): ``{"destination": summary}`` of this node over the test's window
  (hosttelemetry.py); the operator adds ``source``, asked from the source agent after the test.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from . import tcpinfo
from .movers.base import FileResult, TransferJob

PEAK_WINDOW = 1.0  # seconds


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def gbps(nbytes: float, seconds: float | None) -> float | None:
    if seconds is None or seconds <= 0:
        return None
    return nbytes * 8 / 1e9 / seconds


def file_seconds(r: FileResult) -> float | None:
    if r.started_at is None or r.finished_at is None:
        return None
    return max((r.finished_at - r.started_at).total_seconds(), 0.0)


def peak_from_samples(samples: Iterable[tuple[float, int]], window: float = PEAK_WINDOW,
                      short_span: bool = True) -> float | None:
    """Highest rate in bit/s over windows of >= ``window`` seconds of (time, cumulative bytes) samples.

    For each sample the window starts at the latest earlier sample at least ``window`` seconds before it; when the
    samples span less than ``window`` the rate over the whole span is returned (None with ``short_span=False``).
    """
    pts = sorted(samples)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    best: float | None = None
    j = 0
    for i in range(1, len(pts)):
        while j + 1 < i and pts[i][0] - pts[j + 1][0] >= window:
            j += 1
        dt = pts[i][0] - pts[j][0]
        if dt >= window:
            rate = (pts[i][1] - pts[j][1]) * 8 / dt
            best = rate if best is None else max(best, rate)
    if best is None and short_span:
        best = (pts[-1][1] - pts[0][1]) * 8 / (pts[-1][0] - pts[0][0])
    return best


def spread_samples(results: Sequence[FileResult], step: float = 0.25) -> list[tuple[float, int]]:
    """(time, cumulative bytes) as if each file's bytes had arrived evenly from its start to its end: every ``step``
    seconds and at every file's start and end (the curve is linear between those)."""
    spans = [(r.started_at.timestamp(), r.finished_at.timestamp(), r.bytes) for r in results
             if r.started_at is not None and r.finished_at is not None and r.bytes > 0]
    if not spans:
        return []
    first, last = min(a for a, _, _ in spans), max(b for _, b, _ in spans)
    times = {a for a, _, _ in spans} | {b for _, b, _ in spans}
    times.update(first + i * step for i in range(int((last - first) / step) + 1))
    events: list[tuple[float, float, int]] = []  # (time, change of the arrival rate, bytes arriving at once)
    for a, b, n in spans:
        events += [(a, n / (b - a), 0), (b, -n / (b - a), 0)] if b > a else [(b, 0.0, n)]
    events.sort()
    out, value, rate, at, i = [], 0.0, 0.0, first, 0
    for t in sorted(times):  # one sweep: the curve is linear between events
        while i < len(events) and events[i][0] <= t:
            when, change, jump = events[i]
            value += rate * (when - at) + jump
            at, rate, i = when, rate + change, i + 1
        value += rate * (t - at)
        at = t
        out.append((t, round(value)))
    return out


def tcp_summary(results: Sequence[FileResult], receiver_view: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The test's TCP view from its files' (see the module's docstring); without those, from ``receiver_view``
    (the kernel's view of the protocol's own sockets, ssview.py); None when neither."""
    views = [r.tcp for r in results if r.tcp]
    if not views:
        if not receiver_view:
            return None
        return {"retransmits": None, "srtt_median_ms": receiver_view.get("srtt_ms"), "sender": None,
                "receiver": receiver_view}
    sender = tcpinfo.combine(v.get("sender") for v in views)
    receiver = tcpinfo.combine(v.get("receiver") for v in views)
    srtts = [s["srtt_ms"] for v in views if (s := v.get("sender") or v.get("receiver")) and s.get("srtt_ms")]
    return {
        "retransmits": sender.get("retransmits") if sender else None,
        "srtt_median_ms": statistics.median(srtts) if srtts else None,
        "sender": sender,
        "receiver": receiver,
    }


def checksum_verdict(results: Sequence[FileResult]) -> str:
    verified = [r.checksum_ok for r in results if r.checksum_ok is not None]
    if not verified:
        return "skipped"
    return "ok" if all(verified) else "mismatch"


def failure_summary(results: Sequence[FileResult]) -> str | None:
    bad = [r for r in results if r.error or r.bytes != r.size or r.checksum_ok is False]
    if not bad:
        return None
    first = bad[0]
    reason = first.error or (
        "checksum mismatch" if first.checksum_ok is False else f"received {first.bytes} of {first.size} bytes")
    return f"{len(bad)} of {len(results)} files failed; first: {first.name}: {reason}"


def build_record(
    job: TransferJob,
    results: Sequence[FileResult],
    started_at: datetime,
    finished_at: datetime,
    status: str,
    error: str | None = None,
    samples: Iterable[tuple[float, int]] = (),
    receiver_view: dict[str, Any] | None = None,
    implementation: dict[str, str | None] | None = None,
    host: dict[str, Any] | None = None,
) -> dict:
    """A finished record (status succeeded|failed|cancelled) that validates as the contract's transferRecord;
    ``implementation`` (versions.implementation) says which program, in which versions, made it."""
    total = sum(r.bytes for r in results)
    ends = [r.finished_at for r in results if r.finished_at is not None and r.bytes > 0]
    data_end = min(max(ends), finished_at) if ends else finished_at
    wall = max((data_end - started_at).total_seconds(), 0.0)
    durations = [s for r in results if (s := file_seconds(r)) is not None and r.bytes > 0]
    mean = statistics.fmean(durations) if durations else None
    peak_bps = peak_from_samples(samples)
    file_peaks = [r.peak_bps for r in results if r.peak_bps]
    if file_peaks:
        peak_bps = max([peak_bps or 0.0, *file_peaks])
    sizes = {r.size for r in results}
    record = {
        "test_id": job.test_id,
        "protocol": job.protocol,
        "streams": job.streams,
        "concurrency": job.concurrency,
        "status": status,
        "error": error,
        "file_set": job.file_set,
        "file_size": sizes.pop() if len(sizes) == 1 else None,
        "file_count": len(results),
        "total_bytes": total,
        "wall_seconds": wall,
        "mean_transfer_seconds": mean,
        "throughput_gbps": gbps(total, mean) if total else None,
        "aggregate_gbps": gbps(total, wall) if total else None,
        "peak_gbps": peak_bps / 1e9 if peak_bps else None,
        "checksum": checksum_verdict(results),
        "destination_kind": "sink" if job.destination_dir is None and job.remote is None else "store",
        "congestion_control": job.congestion,
        "started_at": iso(started_at),
        "finished_at": iso(finished_at),
        "files": [
            {
                "name": r.name,
                "size": r.size,
                "bytes": r.bytes,
                "started_at": iso(r.started_at or finished_at),
                "finished_at": iso(r.finished_at or finished_at),
                "seconds": file_seconds(r),
                "error": r.error,
                "checksum_ok": r.checksum_ok,
                **({"tcp": tcpinfo.for_file(r.tcp)} if r.tcp else {}),
            }
            for r in results
        ],
    }
    tcp = tcp_summary(results, receiver_view)
    if tcp is not None:
        record["tcp"] = tcp
    if implementation is not None:
        record["implementation"] = implementation
    if host is not None:
        record["host"] = host
    if job.storage.disk:  # disk mode: where each end kept the files, and whether the writes bypassed the cache
        fallbacks = sorted({r.write_fallback for r in results if r.write_fallback})
        record["storage"] = {**job.storage.as_dict(),
                             "direct_write": not fallbacks if job.storage.destination == "disk" else None,
                             "fallback": "; ".join(fallbacks) or None}
    return record
