"""iperf3: raw TCP capacity from the source to this agent (``iperf3 -c <source> -R -P <streams> -J``).

``-R`` makes the source send, as in a pull. The test runs for ``duration`` seconds (half the job timeout, between
1 and 10 s); the record carries one pseudo-file ``iperf3`` holding the bytes received and the measured interval, so
throughput and aggregate are both the received rate. The job's files are not moved.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from .base import FileResult, Mover, MoverUnavailable, Progress, TransferJob
from .external import missing, now, run_program, short

MAX_DURATION = 10.0


def duration_for(timeout: float) -> int:
    return int(max(1, min(MAX_DURATION, timeout / 2)))


def parse_report(text: str) -> tuple[int, float, float]:
    """(bytes received, seconds, bits per second) from ``iperf3 -J`` output; ValueError with iperf3's error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"iperf3 printed no JSON report: {short(text)}") from e
    if data.get("error"):
        raise ValueError(f"iperf3: {data['error']}")
    received = data.get("end", {}).get("sum_received")
    if not received:
        raise ValueError("iperf3 report has no end.sum_received")
    return int(received["bytes"]), float(received["seconds"]), float(received["bits_per_second"])


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
        secs = duration_for(job.timeout)
        argv = ["iperf3", "-c", job.source.host, "-p", str(job.source.port), "-B", self.settings.address,
                "-R", "-P", str(job.streams), "-t", str(secs), "-J"]
        progress.files_total = 1
        start = now()
        proc = await run_program(argv, time.monotonic() + job.timeout)
        result = FileResult(name="iperf3", size=0, started_at=start, finished_at=now())
        if proc.timed_out:
            result.error = f"timed out after {job.timeout:g} s"
            return [result]
        try:
            nbytes, seconds, bps = parse_report(proc.stdout)
        except ValueError as e:
            result.error = str(e) if proc.stdout else f"iperf3 exited with {proc.returncode}: {short(proc.stderr)}"
            return [result]
        result.size = result.bytes = nbytes
        result.finished_at = start + timedelta(seconds=seconds)
        result.peak_bps = bps
        progress.add_bytes(nbytes)
        progress.files_done = 1
        return [result]
