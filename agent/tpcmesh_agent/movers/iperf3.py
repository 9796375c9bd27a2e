"""iperf3: raw TCP capacity from the source to this agent (``iperf3 -c <source> -R -P <streams> -J``).

``-R`` makes the source send, as in a pull; ``--get-server-output`` brings the sender's own figures (the agent's
iperf3 server runs with ``-J``): retransmits, highest cwnd, min/mean/max RTT and the congestion control, kept as the
pseudo-file's sender-side TCP view (the end totals' retransmits alone when the server printed no JSON).
The test runs for the request's ``duration_seconds`` (by default half the
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

from .. import tcpinfo, versions
from .base import FileResult, Mover, Progress, TransferJob
from .external import missing, now, run_program, short

MAX_DURATION = 10.0


def client_argv(job: TransferJob, bind: str, seconds: int) -> list[str]:
    """The iperf3 client's command: receive (-R) from the source for ``seconds``, bound to this agent's address,
    over the source address's family (-4/-6: the family asked for, never a resolver's choice)."""
    argv = ["iperf3", "-c", job.source.host, "-p", str(job.source.port), "-B", bind,
            "-R", "-P", str(job.streams), "-t", str(seconds), "-J", "--get-server-output",
            "-6" if ":" in job.source.host else "-4"]
    if job.congestion:
        argv += ["-C", job.congestion]  # iperf3 passes it to the server, which sends with it
    return argv


def duration_for(timeout: float) -> int:
    return int(max(1, min(MAX_DURATION, timeout / 2)))


MIN_INTERVAL = 0.5  # seconds: a shorter interval (a run's ragged end) is no peak window


@dataclass(frozen=True)
class Report:
    bytes: int  # received
    seconds: float
    bps: float  # the mean received rate
    peak_bps: float | None  # the fastest interval (iperf3 reports every second), None without intervals
    tcp: dict[str, Any] | None = None  # {"sender": summary, "receiver": None} (tcpinfo's shape)
    sender_version: str | None = None  # the sender's iperf3 version (its own JSON's start.version)


def _us_to_ms(v: Any) -> float | None:
    return round(float(v) / 1000, 3) if isinstance(v, int | float) and v > 0 else None


def sender_view(data: dict[str, Any]) -> dict[str, Any] | None:
    """The sender's TCP figures from a ``-R`` report: its own JSON (server_output_json) when the server sent it, else
    the retransmits iperf3 exchanged at the end; None when the report has neither."""
    server = data.get("server_output_json")
    end = (server or {}).get("end") or {}
    streams = [s.get("sender") or {} for s in end.get("streams") or []]
    senders = [s for s in streams if s.get("sender")]
    if senders:
        rtts = [_us_to_ms(s.get("mean_rtt")) for s in senders]
        return tcpinfo.sender_only(
            retransmits=sum(int(s.get("retransmits") or 0) for s in senders),
            cwnd_max_bytes=max((int(s.get("max_snd_cwnd") or 0) for s in senders), default=0) or None,
            min_rtt_ms=min((v for s in senders if (v := _us_to_ms(s.get("min_rtt"))) is not None), default=None),
            srtt_ms=max((v for v in rtts if v is not None), default=None),
            srtt_max_ms=max((v for s in senders if (v := _us_to_ms(s.get("max_rtt"))) is not None), default=None),
            congestion=[c] if (c := end.get("sender_tcp_congestion")) else [],
            connections=len(senders))
    sent = (data.get("end") or {}).get("sum_sent") or {}
    if isinstance(sent.get("retransmits"), int):
        c = (data.get("end") or {}).get("sender_tcp_congestion")
        return tcpinfo.sender_only(retransmits=sent["retransmits"], congestion=[c] if c else [])
    return None


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
    sender = sender_view(data)
    server_start = (data.get("server_output_json") or {}).get("start") or {}
    return Report(int(received["bytes"]), float(received["seconds"]), float(received["bits_per_second"]),
                  max(rates) if rates else None, {"sender": sender, "receiver": None} if sender else None,
                  versions.parse_iperf3(str(server_start.get("version") or "")))


class Iperf3Mover(Mover):
    protocol = "iperf3"
    implementation = "iperf3"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._sender_versions: dict[str, str | None] = {}  # test id -> the sender's version, until asked

    async def peer_version(self, job: TransferJob) -> str | None:
        return self._sender_versions.pop(job.test_id, None)

    def available(self) -> str | None:
        return missing("iperf3")

    async def run(self, job: TransferJob, progress: Progress) -> list[FileResult]:
        self.ensure_available(job)
        secs = int(job.duration) if job.duration else duration_for(job.timeout)
        argv = client_argv(job, self.settings.local_address(job.source.host), secs)
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
        result.tcp = report.tcp
        if report.bytes:  # the runner asks the peer's version only of a test that moved data (no entry left behind)
            self._sender_versions[job.test_id] = report.sender_version
        progress.add_bytes(report.bytes)
        progress.files_done = 1
        return [result]
