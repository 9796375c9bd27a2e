"""Disk mode on the dashboard (issue #28), on the suite's real PostgreSQL: the storage is a grid setting of its own
like the address family (a disk result never overwrites the memory one), the API serves a measurement's storage as
the agent recorded it and filters the grid by it, the nodes' disk ceilings reach the grid (its diagonal in disk
mode), the limit model names the end whose storage binds (source-storage, destination-storage) by its fio ceiling
and by its storage tax, and the pair page says what each end's storage costs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.dashboard import batch, host_end, measurement, post_batch

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
GRID = "/api/v1/grid/?benchmark=mesh/disks&protocol=builtin"
# a → b with the built-in mover, each storage setting; a's disk reads slowly (a 65 % tax), b's writes well (3 %)
RATES = {"memory": 3.4, "disk-to-memory": 1.2, "memory-to-disk": 3.3, "disk": 1.1}
ENDS = {"memory": ("memory", "memory"), "disk-to-memory": ("disk", "memory"), "memory-to-disk": ("memory", "disk"),
        "disk": ("disk", "disk")}
NODES = [{"name": "a", "loopback_gbps": 40.0, "disk_read_gbps": 1.25, "disk_write_gbps": 1.0},
         {"name": "b", "loopback_gbps": 40.0, "disk_read_gbps": 9.0, "disk_write_gbps": 9.0}]


def _transfer(protocol: str, streams: int, gbps: float, at: datetime, storage: str | None = None) -> dict:
    m = measurement("a", "b", protocol=protocol, streams=streams, gbps=gbps, finished=at, rtt_ms=0.2)
    m["host"] = {"source": host_end(64_000_000), "destination": host_end(64_000_000)}
    m["tcp"] = {"retransmits": 0, "sender": {"retransmits": 0, "data_segs_out": 400_000, "congestion": ["cubic"]}}
    if storage is not None:
        src, dst = ENDS[storage]
        m["storage"] = {"source": src, "destination": dst, "direct_write": True if dst == "disk" else None,
                        "fallback": None}
    return m


@pytest.fixture
def disks(client, write_key):
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    # the memory row as every record before disk mode: no storage at all
    ms = [_transfer("builtin", 1, gbps, at, None if s == "memory" else s) for s, gbps in RATES.items()]
    ms.append(_transfer("iperf3", 8, 3.6, at))
    r = client.post("/api/v1/ingest/", json.dumps(batch(ms, name="disks", run="d1", nodes=NODES)),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    return at


def _cells(client, query: str = "") -> dict[str, dict]:
    r = client.get(GRID + query, HTTP_ACCEPT="application/json")
    assert r.status_code == 200, r.content
    return {c["storage"]: c for c in r.json()["cells"]}


def test_each_storage_is_a_cell_of_its_own_and_says_why_it_is_slow(client, disks):
    every = _cells(client)
    assert {s: c["value"] for s, c in every.items()} == RATES
    assert {s: c["value"] for s, c in _cells(client, "&storage=disk&mode=mean&window=1d").items()} == {"disk": 1.1}
    r = client.get(GRID + "&storage=tape", HTTP_ACCEPT="application/json")
    assert r.status_code == 400 and "storage" in r.content.decode()
    nodes = client.get(GRID, HTTP_ACCEPT="application/json").json()["nodes"]
    assert [(n["name"], n["disk_read_gbps"], n["disk_write_gbps"]) for n in nodes] == [
        ("a", 1.25, 1.0), ("b", 9.0, 9.0)]
    # the record's storage as the agent wrote it; a record without one is memory to memory
    rows = client.get("/api/v1/measurements/?protocol=builtin", HTTP_ACCEPT="application/json").json()["results"]
    by = {m["storage_setting"]: m for m in rows}
    assert by["disk"]["storage"] == {"source": "disk", "destination": "disk", "direct_write": True, "fallback": None}
    assert by["memory"]["storage"] is None
    # the limit model: a's slow disk binds every cell it reads from, by its fio ceiling and its tax; b's disk
    # costs 3 %, no bound; the memory cell is not storage's
    assert {s: c["binding_limit"] for s, c in every.items()} == {
        "memory": "network-capacity", "disk-to-memory": "source-storage", "memory-to-disk": "network-capacity",
        "disk": "source-storage"}
    assert every["disk"]["fix"] == ("a's storage costs 65% of this pair's rate: 1.2 Gbit/s with its disk against "
                                    "3.4 Gbit/s memory to memory; its disk path reads 1.25 Gbit/s (fio), so the "
                                    "device is the ceiling")
    detail = client.get(f"/api/v1/measurements/{by['disk-to-memory']['id']}/", HTTP_ACCEPT="application/json").json()
    bounds = {(b["limit"], tuple(sorted(b["evidence"]))) for b in detail["diagnosis"]["bounds"]}
    assert ("source-storage", ("disk_read_gbps",)) in bounds
    assert ("source-storage", ("memory_gbps", "source_disk_gbps", "storage_tax")) in bounds
    assert not any(limit == "destination-storage" for limit, _ in bounds)  # b kept its files in memory


def test_the_pages_offer_the_storage_and_the_storage_tax(client, disks):
    page = client.get("/grid/mesh/disks/?protocol=builtin").content.decode()
    assert 'name="storage"' in page and '<option value="memory" selected>' in page
    assert '{"ceilings": {"loopback": 40.0}}' in page
    disk = client.get("/grid/mesh/disks/?protocol=builtin&storage=disk").content.decode()
    assert '<option value="disk" selected>' in disk
    # the diagonal in disk mode: each node's read and write ceilings, not its loopback
    assert '{"ceilings": {"disk read": 1.25, "disk write": 1.0}}' in disk and '"loopback"' not in disk
    pair = client.get("/pair/a/b/?benchmark=mesh/disks").content.decode()
    table = pair[pair.index('id="storage-tax"'):]
    row = table[table.index("<tr><td>"):table.index("</table>")]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells == ["a → b", "builtin ×1", "3.40", "1.20", "3.30", "1.10", "65 %", "3 %", "68 %"]


def test_the_database_paths_pick_a_storage_as_the_portable_one_does(disks):
    from django.db import connection
    from results import maintenance, selectors
    from results.models import Benchmark

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's builders")

    bench = Benchmark.objects.get(name="disks")
    names = {n.id: n.name for n in selectors.benchmark_nodes(bench)}
    at = datetime.now(UTC)
    bounds = bench.effective_thresholds()["throughput"]
    for mode in selectors.GRID_MODES:
        for store in (None, "disk-to-memory"):
            pick = selectors.Pick(storage=store)
            portable = selectors._cells_in_python(bench, "builtin", pick, at, bounds, mode, timedelta(days=1), names,
                                                  maintenance.overlay(at))
            fast = json.loads(selectors.grid_cells_json(bench, "builtin", pick, at, bounds, mode, timedelta(days=1)))
            want = {s: v for s, v in RATES.items() if store in (None, s)}
            assert {c["storage"]: c["value"] for c in portable} == want, (mode, store)
            assert {c["storage"]: c["value"] for c in fast} == want, (mode, store)


def test_a_node_whose_disk_holds_every_test_into_it_is_a_storage_problem_not_its_nic(client, write_key):
    """Disk mode, four nodes: every disk-to-disk test into `slow` runs at its disk's write ceiling (0.16 Gbit/s, the
    lab's 20 MB/s throttle of test_lab_disk.py), the rest at 3 Gbit/s: each of those cells says destination-storage
    and the problems page has one storage problem naming slow's disk, no "look at its NIC"."""
    names = ["a1", "a2", "b1", "slow"]
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    ms = []
    for s in names:
        for d in names:
            if s != d:
                m = _transfer("builtin", 1, 0.16 if d == "slow" else 3.0, at, "disk")
                m["source"], m["destination"] = s, d
                ms.append(m)
    nodes = [{"name": n, "loopback_gbps": 40.0, "disk_read_gbps": 9.0,
              "disk_write_gbps": 0.16 if n == "slow" else 9.0} for n in names]
    post_batch(client, write_key, batch(ms, name="disks", run="d2", nodes=nodes,
                                        thresholds={"goodGbps": 2.0, "warnGbps": 1.0}))
    into = client.get("/api/v1/measurements/?destination=slow&storage_setting=disk").json()["results"]
    assert sorted(m["binding_limit"] for m in into) == ["destination-storage"] * 3, into
    active = client.get("/api/v1/problems/?active=true").json()["results"]
    assert [(p["kind"], p["key"]) for p in active] == [("storage", "storage:slow:destination-storage")], active
    assert "every slow disk test to slow is held by the disk it writes" in active[0]["summary"]
