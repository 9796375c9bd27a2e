"""The settings a benchmark's cells have, found on PostgreSQL by a skip scan of the cell key's index
(selectors.cell_setting_rows): the same as reading every cell, for every protocol and for one."""

from datetime import UTC, datetime, timedelta

import pytest
from results import selectors
from results.models import Benchmark, PairLatest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_the_skip_scan_finds_every_setting_and_only_those(client, write_key):
    t = datetime(2026, 11, 20, tzinfo=UTC)
    ms = []
    for k, (protocol, streams, family, cc, auth, disk) in enumerate([
            ("builtin", 1, "ipv4", None, None, False), ("builtin", 8, "ipv4", "bbr", None, False),
            ("builtin", 8, "ipv6", "bbr", None, True), ("xrootd-https", 4, "ipv4", None, "token", False),
            ("xrootd-https", 4, "ipv4", None, "x509", False), ("rtt", None, "ipv6", None, None, False)]):
        for src, dst in (("a", "b"), ("b", "a"), ("a", "c")):  # several cells per setting
            m = measurement(src, dst, protocol=protocol, streams=streams, finished=t + timedelta(minutes=k))
            m.update(address_family=family, congestion_control=cc, auth=auth)
            if disk:
                m["storage"] = {"source": "disk", "destination": "disk", "direct_write": True, "fallback": None}
            ms.append(m)
    r = client.post("/api/v1/ingest/", batch(ms, name="scan"), format="json", HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200, r.content
    bench = Benchmark.objects.get(name="scan")
    cells = PairLatest.objects.filter(benchmark=bench)
    every = sorted(set(cells.values_list(*selectors.SETTING_KEY)))
    assert len(every) == 6 and selectors.cell_setting_rows(bench) == every
    for protocol in ("builtin", "xrootd-https", "rtt", "iperf3"):
        assert selectors.cell_setting_rows(bench, protocol) == [s for s in every if s[0] == protocol]
    assert selectors.benchmark_protocols(bench) == {"builtin": [1, 8], "rtt": [0], "xrootd-https": [4]}
    assert selectors.cell_settings(bench, "builtin") == {
        "address_family": ["ipv4", "ipv6"], "congestion_control": ["", "bbr"], "auth": [""],
        "storage": ["memory", "disk"]}
