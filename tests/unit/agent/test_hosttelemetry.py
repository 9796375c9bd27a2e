"""Host telemetry's summaries on constructed samples (the arithmetic), and one sample of the real node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jsonschema
import psutil
from tpcmesh_agent import hosttelemetry as ht
from tpcmesh_agent.hosttelemetry import Sample

from tests.support.paths import REPO

# one core's cumulative seconds: (user, nice, system, idle, iowait, irq, softirq, steal)
IDLE = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0)


def _add(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _cpu_run(steps: list[list[tuple[float, ...]]]) -> list[Sample]:
    """Samples 1 s apart whose cores spend each second as ``steps`` says (one tuple of shares per core)."""
    cores = tuple((0.0,) * 8 for _ in steps[0])
    out = [Sample(t=100.0, cpu=cores)]
    for i, step in enumerate(steps, 1):
        cores = tuple(_add(c, s) for c, s in zip(cores, step, strict=True))
        out.append(Sample(t=100.0 + i, cpu=cores))
    return out


def test_a_saturated_core_shows_even_when_the_scheduler_moves_it():
    hog = (0.6, 0.0, 0.1, 0.0, 0.0, 0.0, 0.3, 0.0)  # 100 % busy, 30 % of it softirq
    # the busy thread moves between the two cores every second: each core alone is only half busy
    cpu = ht.cpu_summary(_cpu_run([[hog, IDLE], [IDLE, hog], [hog, IDLE], [IDLE, hog]]))
    assert cpu is not None
    assert cpu["cores"] == 2 and cpu["busy_pct"] == 50.0 and cpu["softirq_pct"] == 15.0
    assert cpu["busiest_core_pct"] == 100.0 and cpu["busiest_core_softirq_pct"] == 30.0
    assert cpu["saturated_pct"] == 100.0


def test_iowait_and_steal_are_not_busy_and_a_calm_node_is_not_saturated():
    waiting = (0.2, 0.0, 0.1, 0.3, 0.4, 0.0, 0.0, 0.0)
    stolen = (0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5)
    cpu = ht.cpu_summary(_cpu_run([[waiting, stolen], [waiting, IDLE]]))
    assert cpu is not None
    assert cpu["iowait_pct"] == 20.0 and cpu["user_pct"] == 22.5
    assert cpu["busiest_core_pct"] == 40.0 and cpu["saturated_pct"] == 0.0
    assert ht.cpu_summary(_cpu_run([[IDLE]])[:1]) is None  # one sample is no interval


def test_process_cpu_counts_from_the_window_start_or_the_process_start():
    start = Sample(t=10.0, cpu=(), procs={1: ("agent", 1.0, 50.0), 2: ("xrootd", 2.0, 7.0)})
    mid = Sample(t=11.0, cpu=(), procs={1: ("agent", 1.0, 50.5), 2: ("xrootd", 2.0, 8.0),
                                        3: ("xrdcp", 10.5, 0.2)})
    # pid 2 is a new xrootd (another start time): all of its 0.4 s count, none of the old one's after its last
    end = Sample(t=12.0, cpu=(), procs={1: ("agent", 1.0, 51.0), 2: ("xrootd", 11.9, 0.4)})
    p = ht.process_summary([start, mid, end])
    assert p["agent"] == {"cpu_seconds": 1.0, "cpu_pct": 50.0, "processes": 1}
    assert p["xrootd"] == {"cpu_seconds": 1.4, "cpu_pct": 70.0, "processes": 2}
    assert p["xrdcp"] == {"cpu_seconds": 0.2, "cpu_pct": 10.0, "processes": 1}


def test_interface_deltas_and_only_the_driver_counters_that_moved():
    first = Sample(t=0.0, cpu=(), links={"eth0": (100, 200, 0, 1, 0, 0), "lo": (5, 5, 0, 0, 0, 0)},
                   driver={"eth0": {"rx_drops": 3, "tx_timeouts": 0}})
    last = Sample(t=2.0, cpu=(), links={"eth0": (10_100, 900, 4, 1, 0, 2), "lo": (9, 9, 0, 0, 0, 0)},
                  driver={"eth0": {"rx_drops": 10, "tx_timeouts": 0}})
    eth = ht.interface_summary([first, last], "eth0")
    assert eth == {"name": "eth0", "rx_bytes": 10_000, "tx_bytes": 700, "rx_dropped": 4, "tx_dropped": 0,
                   "rx_errors": 0, "tx_errors": 2, "driver": {"rx_drops": 7}}
    assert ht.interface_summary([first, last], None)["name"] == "eth0"  # no peer: the one that moved the most
    lo = ht.interface_summary([first, last], "lo")
    assert lo is not None and lo["rx_bytes"] == 4 and lo["driver"] is None  # loopback's driver keeps none
    gone = ht.interface_summary([first, last], "eth9")
    assert gone is not None and gone["rx_bytes"] is None


def test_the_window_is_bracketed_by_the_samples_around_it():
    ring = [Sample(t=float(t), cpu=()) for t in range(10)]
    assert [s.t for s in ht.window(ring, 3.5, 6.2)] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert [s.t for s in ht.window(ring, 4.0, 5.0)] == [4.0, 5.0]
    assert [s.t for s in ht.window(ring, 8.5, 20.0)] == [8.0, 9.0]  # the newest is all there is


def test_limits_read_the_sysctls_of_a_given_tree(tmp_path: Path):
    for name, text in {"net/ipv4/tcp_rmem": "4096\t131072\t33554432\n", "net/ipv4/tcp_wmem": "4096 16384 4194304",
                       "net/core/rmem_max": "212992", "net/ipv4/tcp_congestion_control": "cubic\n",
                       "net/ipv4/tcp_adv_win_scale": "-2\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    got = ht.limits(None, tmp_path)
    assert got == {"tcp_rmem_max_bytes": 33554432, "tcp_wmem_max_bytes": 4194304, "rmem_max_bytes": 212992,
                   "wmem_max_bytes": None, "congestion_control": "cubic", "tcp_adv_win_scale": -2,
                   "kernel": os.uname().release, "mtu": None, "speed_mbps": None}


def test_a_real_sample_of_this_node():
    sampler = ht.Sampler(0.05)
    first = sampler.sample()
    sum(i * i for i in range(300_000))  # some CPU of this process between the samples
    last = sampler.sample()
    assert len(first.cpu) == psutil.cpu_count() and "lo" in last.links
    assert last.procs[os.getpid()][0] == "agent" and last.procs[os.getpid()][2] > first.procs[os.getpid()][2]
    assert last.mem_available and last.mem_total and last.mem_available <= last.mem_total
    summary = ht.summarize([first, last], "lo", ht.limits("lo"))
    assert summary is not None and summary["limits"]["mtu"] == 65536  # loopback's MTU in any namespace
    assert summary["limits"]["tcp_rmem_max_bytes"] == int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    assert summary["processes"]["agent"]["cpu_seconds"] > 0
    sampler.stop()
    schema = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())
    jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/host"}).validate({"destination": summary})


def test_the_senders_view_sums_the_intervals_towards_the_peer_only():
    # SENT_COUNTERS: bytes acked, busy µs, rwnd-limited µs, sndbuf-limited µs, retransmits, bytes retransmitted, segs
    before = Sample(t=0.0, cpu=(), sent={("10.0.0.2", 7): (9, 9, 9, 9, 9, 9, 9)})  # before the window: not counted
    one = Sample(t=1.0, cpu=(), sent={("10.0.0.2", 7): (5_000_000, 1_000_000, 800_000, 0, 2, 2896, 3500),
                                      ("10.0.0.9", 8): (1, 1_000_000, 0, 0, 0, 0, 1)})  # another peer
    two = Sample(t=2.0, cpu=(), sent={("10.0.0.2", 7): (5_000_000, 1_000_000, 900_000, 100_000, 1, 1448, 3500),
                                      ("10.0.0.2", 11): (1_000_000, 2_000_000, 0, 0, 0, 0, 700)})
    sent = ht.sent_summary([before, one, two], "10.0.0.2")
    assert sent == {"connections": 2, "retransmits": 3, "bytes_retrans": 4344, "data_segs_out": 7700,
                    "busy_ms": 4000.0, "rwnd_limited_fraction": 0.425, "sndbuf_limited_fraction": 0.025}
    assert ht.sent_summary([before, one, two], "10.0.0.3") is None  # nothing sent there: a receiver
    assert ht.sent_summary([before, one, two], None) is None
    assert ht._plain("::ffff:10.0.0.2") == "10.0.0.2" and ht._plain("2001:db8::2") == "2001:db8::2"


def test_the_first_sample_is_taken_before_start_returns():
    """A test begun as soon as the agent is ready has a sample before it: its window's counters start there."""
    sampler = ht.Sampler(60.0)  # the thread's next sample a minute away: only start's own can be in the ring
    before = time.time()
    sampler.start()
    try:
        assert len(sampler.ring) == 1 and sampler.ring[0].t >= before
        since = time.time()
        summary = sampler.summary(since, since + 0.01, "127.0.0.1")
        assert summary is not None and summary["window"]["samples"] == 2
    finally:
        sampler.stop()
