"""iperf3: raw TCP capacity from the source to this agent (``iperf3 -c <source> -R -P <streams> -J``).

``-R`` makes the source send, as in a pull. The test runs for the request's ``duration_seconds`` (by default half the
job timeout, between 1 and 10 s); the record carries one pseudo-file ``iperf3`` holding the bytes received and the
measured interval, so throughput and aggregate are both the received rate, and the peak is the fastest of iperf3's
1 s intervals (the bytes are only known once iperf3 ends). The job's files are not moved.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .base import FileResult, Mover, MoverUnavailable, Progress, TransferJob
from .external import missing, now, run_program, short

MAX_DURATION = 10.0


def duration_for(timeout: float) -> int:
    return int(max(1, min(MAX_DURATION, timeout / 2)))


MIN_INTERVAL = 0.5  # seconds: a shorter interval (a run's ragged end) is no peak window


@dataclass(frozen=True)
class Report:
    bytes: int  # received
    seconds: float
    bps: float  # the mean received rate
    peak_bps: float | None  # the fastest interval (iperf3 reports every second), None without intervals


def parse_report(text: str) -> Report:
    """The received bytes, time, mean and peak rate from ``iperf3 -J`` output; ValueError with iperf3's error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"iperf3 printed no JSON report: {short(text)}") from e
    if data.get("error"):
        raise ValueError(f"iperf3: {data['error']}")
    received = data.get("end", {}).get("sum_received")
    if not received:
        raise ValueError("iperf3 report has no end.sum_received")
    try:
        rates = [float(i["sum"]["bytes"]) * 8 / float(i["sum"]["seconds"]) for i in data.get("intervals", [])
                 if not i["sum"].get("omitted") and float(i["sum"]["seconds"]) >= MIN_INTERVAL]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"iperf3 report has a malformed interval: {e}") from e
    return Report(int(received["bytes"]), float(received["seconds"]), float(received["bits_per_second"]),
                  max(rates) if rates else None)


class Iperf3Mover(Mover):
    protocol = "iperf3"

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def available(self) -> str | None:
        return missing("iperf3")

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        why = self.available()
        if why:
            raise MoverUnavailable(why)
        secs = int(job.duration) if job.duration else duration_for(job.timeout)
        argv = ["iperf3", "-c", job.source.host, "-p", str(job.source.port), "-B", self.settings.address,
                "-R", "-P", str(job.streams), "-t", str(secs), "-J"]
        progress.files_total = 1
        progress.end_only = True  # the bytes arrive in one piece when iperf3 has ended
        start = now()
        proc = await run_program(argv, time.monotonic() + job.timeout)
        result = FileResult(name="iperf3", size=0, started_at=start, finished_at=now())
        if proc.timed_out:
            result.error = f"timed out after {job.timeout:g} s"
            return [result]
        try:
            report = parse_report(proc.stdout)
        except ValueError as e:
            result.error = str(e) if proc.stdout else f"iperf3 exited with {proc.returncode}: {short(proc.stderr)}"
            return [result]
        result.size = result.bytes = report.bytes
        result.finished_at = start + timedelta(seconds=report.seconds)
        result.peak_bps = report.peak_bps
        progress.add_bytes(report.bytes)
        progress.files_done = 1
        return [result]
