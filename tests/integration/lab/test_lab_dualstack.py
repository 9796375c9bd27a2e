"""Dual stack on the WAN lab (issue #15): agents listening on their namespaces' IPv4 and IPv6 addresses are measured
over both families, each a setting and a grid cell of its own; a node with IPv4 alone is measured over IPv4 and
skipped over IPv6 with the reason."""

from __future__ import annotations

import pytest
from tpcmesh_lab.netns import netns_unavailable_reason

from tests.support.dashboard import batch
from tests.support.labmesh import lab_mesh

pytestmark = [
    pytest.mark.netns,
    pytest.mark.integration,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

DELAY_MS = 5
NODES = ["ds1", "ds2", "v4only"]
SPEC = {"protocols": ["builtin", "iperf3"], "streams": [1], "concurrency": 2, "fileSet": {"count": 2, "size": "4MB"},
        "addressFamilies": ["ipv4", "ipv6"], "iperf3": {"durationSeconds": 1}, "loopback": {"enabled": False},
        "timeoutSeconds": 60, "retries": 0}


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    with lab_mesh(NODES, DELAY_MS, tmp_path_factory.mktemp("dual-lab"), protocols=("builtin", "iperf3"),
                  family="dual", single_stack=("v4only",)) as mesh:
        yield mesh


@pytest.mark.django_db
def test_dual_stack_agents_are_measured_over_both_families_and_a_v4_only_node_is_skipped_over_ipv6(dual):
    from django.test import Client
    from results import services

    assert {a.node.name: a.agent().families for a in dual.agents} == {
        "ds1": {"ipv4", "ipv6"}, "ds2": {"ipv4", "ipv6"}, "v4only": {"ipv4"}}
    st = dual.run(SPEC, "dual")
    settings = 3  # rtt, builtin, iperf3 per family
    measured = settings * 6 + settings * 2  # IPv4: every pair; IPv6: ds1 <-> ds2
    assert (st["planned"], st["succeeded"], st["failed"]) == (measured, measured, 0), st.get("recentFailures")
    v6 = [m for m in st["outbox"] if m.get("address_family") == "ipv6"]
    assert {(m["source"], m["destination"]) for m in v6} == {("ds1", "ds2"), ("ds2", "ds1")}
    assert len(v6) == settings * 2 and all(m["status"] == "succeeded" for m in v6)
    assert all(2 * DELAY_MS * 0.9 <= m["rtt_ms"] <= 2 * DELAY_MS + 10 for m in v6 if m["protocol"] == "rtt")
    assert st["familySkipped"] == "node v4only has no IPv6 address (12 IPv6 tests)"  # 4 pairs x 3 settings

    key = services.create_api_token("lab", write=True)[1]
    client = Client()
    r = client.post("/api/v1/ingest/", batch(st["outbox"], namespace="lab", name="dual"),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200, r.content
    cells = client.get("/api/v1/grid/?benchmark=lab/dual&protocol=builtin", HTTP_ACCEPT="application/json").json()
    families = {(c["source"], c["destination"], c["address_family"]) for c in cells["cells"]}
    assert ("ds1", "ds2", "ipv4") in families and ("ds1", "ds2", "ipv6") in families
    assert ("ds1", "v4only", "ipv4") in families and ("ds1", "v4only", "ipv6") not in families
    assert len(families) == 6 + 2
