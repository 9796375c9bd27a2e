"""tracepath's text output parsed (tpcmesh_agent.tracepath): hops, path MTU, reached; the interface's MTU."""

from __future__ import annotations

import asyncio

from tpcmesh_agent.tracepath import interface_mtu, parse_tracepath, trace_path

# iputils 20221126 (Debian bookworm), captured in the routed lab (test_lab_paths.py): through a router whose far
# link carries 1400-byte packets; TTL 2 is printed twice (tracepath re-sends after learning the smaller MTU)
THROUGH_A_ROUTER = """\
 1?: [LOCALHOST]                      pmtu 1500
 1:  198.19.251.6                                          0.089ms
 1:  198.19.251.6                                          0.013ms
 2:  198.19.251.6                                          0.018ms pmtu 1400
 2:  198.19.252.1                                          0.028ms reached
     Resume: pmtu 1400 hops 2 back 2
"""

SILENT_HOP = """\
 1?: [LOCALHOST]                      pmtu 1500
 1:  192.0.2.1                                             0.412ms
 2:  no reply
 3:  203.0.113.7                                           1.204ms asymm  4
 4:  203.0.113.9                                           1.330ms reached
     Resume: pmtu 1500 hops 4 back 5
"""


def test_hops_by_their_last_answer_and_the_resume_pmtu():
    p = parse_tracepath(THROUGH_A_ROUTER)
    assert [h["address"] for h in p["hops"]] == ["198.19.251.6", "198.19.252.1"]
    assert p["hops"][1] == {"ttl": 2, "address": "198.19.252.1", "rtt_ms": 0.028}
    assert p["pmtu"] == 1400 and p["reached"] is True


def test_a_silent_hop_keeps_its_place():
    p = parse_tracepath(SILENT_HOP)
    assert [h["address"] for h in p["hops"]] == ["192.0.2.1", None, "203.0.113.7", "203.0.113.9"]
    assert p["pmtu"] == 1500 and p["reached"]


def test_unreachable_and_empty():
    p = parse_tracepath(" 1?: [LOCALHOST]   pmtu 1400\n 1:  192.0.2.2    3063.365ms !H\n     Resume: pmtu 1400 \n")
    assert p == {"hops": [{"ttl": 1, "address": "192.0.2.2", "rtt_ms": 3063.365}], "pmtu": 1400, "reached": False}
    assert parse_tracepath("") == {"hops": [], "pmtu": None, "reached": False}


def test_interface_mtu_reads_sysfs(tmp_path):
    (tmp_path / "eth0").mkdir()
    (tmp_path / "eth0" / "mtu").write_text("9000\n")
    assert interface_mtu("eth0", tmp_path) == 9000
    assert interface_mtu("nope", tmp_path) is None


def test_real_tracepath_to_loopback():
    p = asyncio.run(trace_path("127.0.0.1", max_hops=3, timeout=20))
    assert p["error"] is None, p
    assert [h["address"] for h in p["hops"]] == ["127.0.0.1"] and p["reached"]
    assert p["interface"] == "lo" and p["interface_mtu"] == 65536 and p["pmtu"] == 65535
