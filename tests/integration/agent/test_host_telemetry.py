"""Host telemetry at both ends of a real test: two real agents on loopback addresses, the built-in mover, a CPU hog
pinned to one core while the test runs. The destination's summary comes in its record, the source's from its
control API (GET /api/v1/host, as the operator asks for it after the test); both see the busy core, the bytes on
the interface the test used (loopback here) and the kernel's limits of their network namespace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

SIZE = 24_000_000  # at 8 MB/s: a 3 s test, a dozen samples at 0.25 s
HOG = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def _validate(document: dict, definition: str) -> None:
    schema = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())
    jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{definition}"},
                                    format_checker=jsonschema.FormatChecker()).validate(document)


def _sysctl_max(name: str) -> int:
    return int(Path("/proc/sys", name).read_text().split()[-1])


def _check_end(host: dict, *, moved: str) -> None:
    cpu = host["cpu"]
    # core 0 was 100 % busy the whole test: the busiest core is, in every interval
    assert cpu["busiest_core_pct"] >= 90 and cpu["saturated_pct"] >= 50, cpu
    assert host["interface"]["name"] == "lo"
    assert host["interface"][moved] >= SIZE, host["interface"]  # the file's bytes, and the headers
    assert host["interface"]["driver"] is None  # loopback's driver keeps no statistics
    assert host["processes"]["agent"]["cpu_seconds"] > 0
    assert host["memory"]["available_min_bytes"] > 0
    limits = host["limits"]
    assert limits["tcp_rmem_max_bytes"] == _sysctl_max("net/ipv4/tcp_rmem")
    assert limits["wmem_max_bytes"] == _sysctl_max("net/core/wmem_max")
    assert limits["mtu"] == 65536 and limits["congestion_control"]
    assert host["window"]["seconds"] >= 2.5 and host["window"]["samples"] >= 8


def test_both_ends_summaries_show_a_busy_core_and_the_interface_counters(agent_factory):
    src, dst = agent_factory.many(2, host_sample_interval=0.25, builtin_max_rate=8_000_000)
    fs = src.file_set(count=1, size=SIZE)
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        time.sleep(0.5)  # a sample of the hog before the test starts
        rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                           file_set={"count": 1, "size": SIZE}, files=fs["files"], destination="sink",
                           timeout_seconds=60)
        window = {"since": rec["started_at"], "until": rec["finished_at"], "peer": dst.address}
        answer = src.get("/api/v1/host", params=window)
    finally:
        hog.kill()
        hog.wait()
    assert rec["status"] == "succeeded", rec["error"]
    _validate(rec, "transferRecord")
    assert set(rec["host"]) == {"destination"}  # the operator adds the source's
    _check_end(rec["host"]["destination"], moved="rx_bytes")
    assert answer.status_code == 200, answer.text
    _validate({"source": answer.json()}, "host")
    _check_end(answer.json(), moved="tx_bytes")
    # why the built-in sender waited, from the source's own sockets
    sender = rec["tcp"]["sender"]
    assert sender["busy_ms"] > 0 and sender["rwnd_limited_fraction"] is not None
    assert sender["sndbuf_limited_fraction"] is not None


def test_the_host_endpoint_names_what_is_wrong(agent_factory):
    agent = agent_factory(host_sample_interval=0.25)
    time.sleep(1.0)  # a few samples in the ring: a window that reaches back further is refused, not cut short
    r = agent.get("/api/v1/host", params={"until": "2026-11-28T00:00:00Z"})
    assert r.status_code == 422 and "since is required" in r.json()["error"]
    r = agent.get("/api/v1/host", params={"since": "yesterday", "until": "1"})
    assert r.status_code == 422 and "since 'yesterday' is neither an RFC 3339 time" in r.json()["error"]
    r = agent.get("/api/v1/host", params={"since": "100", "until": "50"})
    assert r.status_code == 422 and "before since" in r.json()["error"]
    r = agent.get("/api/v1/host", params={"since": "1", "until": "2", "peer": "site-c"})
    assert r.status_code == 422 and "peer must be an IP address" in r.json()["error"]
    r = agent.client(token="").get("/api/v1/host", params={"since": "1", "until": "2"})
    assert r.status_code == 401
    for until in ("2", str(time.time())):  # since 1970: long before the oldest sample
        r = agent.get("/api/v1/host", params={"since": "1", "until": until})
        assert r.status_code == 404 and "no host samples" in r.json()["error"], (until, r.text[:200])
    off = agent_factory(host_sample_interval=0)
    r = off.get("/api/v1/host", params={"since": "1", "until": str(time.time())})
    assert r.status_code == 404 and "host telemetry is off" in r.json()["error"]
