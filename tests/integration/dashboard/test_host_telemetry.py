"""Both ends' host telemetry and why TCP waited: stored at ingest (PostgreSQL's COPY path), served by the
measurement's API (the contract's `host`, refused with the field named when off it), shown on the pair page beside
the throughput; rows without it stay valid and show a dash."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from results.models import Measurement

from tests.integration.dashboard.test_api import post
from tests.support.dashboard import batch, measurement, page_table

pytestmark = [pytest.mark.integration]
T0 = datetime.now(UTC) - timedelta(hours=3)

# one end's summary as an agent gives it (tpcmesh_agent.hosttelemetry), shortened
END = {
    "window": {"seconds": 12.5, "samples": 14},
    "cpu": {"cores": 16, "busy_pct": 9.1, "user_pct": 3.0, "system_pct": 2.1, "softirq_pct": 4.0, "iowait_pct": 0.2,
            "busiest_core_pct": 97.4, "busiest_core_softirq_pct": 41.2, "saturated_pct": 80.0},
    "processes": {"agent": {"cpu_seconds": 0.8, "cpu_pct": 6.4, "processes": 1},
                  "xrootd": {"cpu_seconds": 10.6, "cpu_pct": 84.8, "processes": 2}},
    "interface": {"name": "ens1f0", "rx_bytes": 11_000_000_000, "tx_bytes": 4_000_000, "rx_dropped": 2,
                  "tx_dropped": 0, "rx_errors": 0, "tx_errors": 0, "driver": {"rx_missed_errors": 5}},
    "memory": {"available_min_bytes": 30_000_000_000, "total_bytes": 64_000_000_000},
    "limits": {"tcp_rmem_max_bytes": 6_291_456, "tcp_wmem_max_bytes": 4_194_304, "rmem_max_bytes": 212_992,
               "wmem_max_bytes": 212_992, "congestion_control": "cubic", "mtu": 9000, "speed_mbps": 100_000},
}
TCP = {"retransmits": 3, "srtt_median_ms": 53.0, "receiver": None,
       "sender": {"retransmits": 3, "busy_ms": 12_000.0, "rwnd_limited_fraction": 0.87,
                  "sndbuf_limited_fraction": 0.02, "congestion": ["cubic"]}}


def _host() -> dict:
    calm = copy.deepcopy(END)
    calm["cpu"].update(busiest_core_pct=35.0, busiest_core_softirq_pct=3.0, saturated_pct=0.0)
    calm["interface"].update(rx_dropped=0, driver={})
    return {"source": calm, "destination": copy.deepcopy(END)}


@pytest.mark.django_db
def test_the_host_telemetry_is_stored_and_served(client, write_key):
    new, old = measurement("a", "b", files=1), measurement("b", "a")
    new["host"], new["tcp"] = _host(), TCP
    r = post(client, batch([new, old]), write_key)
    assert r.status_code == 200, r.content
    assert Measurement.objects.get(id=new["id"]).host == new["host"]  # JSON through COPY
    assert Measurement.objects.get(id=old["id"]).host is None  # a record from before the field
    detail = client.get(f"/api/v1/measurements/{new['id']}/").json()
    assert detail["host"] == new["host"]
    assert detail["tcp"]["sender"]["rwnd_limited_fraction"] == 0.87
    assert client.get(f"/api/v1/measurements/{old['id']}/").json()["host"] is None
    bad = measurement("a", "b")
    bad["host"] = _host()
    bad["host"]["destination"]["cpu"]["busiest_core_pct"] = 140.0
    r = post(client, batch([bad]), write_key)
    assert r.status_code == 400 and "measurements[0].host.destination.cpu.busiest_core_pct" in r.content.decode()
    worse = measurement("a", "b")
    worse["tcp"] = {"sender": {"rwnd_limited_fraction": 1.5}}
    r = post(client, batch([worse]), write_key)
    assert r.status_code == 400 and "measurements[0].tcp.sender.rwnd_limited_fraction" in r.content.decode()


@pytest.mark.django_db
def test_the_pair_page_shows_both_ends_and_why_tcp_waited_beside_the_throughput(client, write_key):
    told = measurement("a", "b", gbps=0.47, finished=T0 + timedelta(hours=1))
    told["host"], told["tcp"] = _host(), TCP
    silent = measurement("a", "b", gbps=0.5, finished=T0)
    r = post(client, batch([told, silent]), write_key)
    assert r.status_code == 200, r.content
    rows = page_table(client, "/pair/a/b/", "newest").split("<tr")[2:]  # newest first, after the header
    assert len(rows) == 2 and "0.47" in rows[0] and "0.50" in rows[1]
    assert ("dst: busiest core 97 % (softirq 41 %), saturated 80 % of the time, 7 drops/errors on ens1f0, "
            "xrootd 85 %") in rows[0]
    assert "src: busiest core 35 % (softirq 3 %), 0 drops/errors on ens1f0, xrootd 85 %" in rows[0]
    assert "receive window 87 %, send buffer 2 % of 12.0 s busy" in rows[0]
    assert "tcp_rmem max 6.3 MB" in rows[0] and "MTU 9000" in rows[0] and "speed 100000 Mbit/s" in rows[0]
    assert 'class="hosts">–</td><td class="waited">–</td>' in rows[1]  # no telemetry recorded: a dash, no guess
