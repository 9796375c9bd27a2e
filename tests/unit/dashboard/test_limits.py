"""The limit model (results/diagnosis/limits.py) on constructed telemetry: each limit, the tie rules, missing data,
and the demo's far node (issue #26)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from results.diagnosis.limits import (
    AT_BOUND,
    LIMITS,
    TIE_BAND,
    TIE_ORDER,
    Host,
    Measurement,
    PathCapacity,
    Tcp,
    diagnose,
    receive_window_fraction,
)

MiB = 1 << 20
# Debian 12's kernel and its defaults: tcp_rmem max 6 MiB, tcp_wmem max 4 MiB, tcp_adv_win_scale 1
DEBIAN12 = {"kernel": "6.1.0-26-amd64", "tcp_rmem_max": 6 * MiB, "tcp_wmem_max": 4 * MiB, "tcp_adv_win_scale": 1,
            "rmem_max": 212992, "wmem_max": 212992, "congestion_control": "cubic", "mtu": 9000}
SITE_A = Host(name="site-a-1", loopback_gbps=25.0, busiest_core_percent=35.0, **DEBIAN12)  # type: ignore[arg-type]
SITE_C = Host(name="site-c", loopback_gbps=24.0, busiest_core_percent=30.0, **DEBIAN12)  # type: ignore[arg-type]
BIG = {"tcp_rmem_max": 256 * MiB, "tcp_wmem_max": 256 * MiB}


def far(gbps: float, streams: int = 1, protocol: str = "iperf3", **kw) -> Measurement:
    """site-a-1 -> site-c, 53 ms, the demo's 8-stream iperf3 at 3.6 Gbit/s as the path."""
    return Measurement(gbps=gbps, protocol=protocol, streams=streams, rtt_ms=53.0, source=SITE_A,
                       destination=SITE_C, path=PathCapacity(3.6, 8), **kw)


# -- the demo's far node -------------------------------------------------------------------------------------------

def test_the_demos_far_node_single_stream_is_receive_window_limited_with_the_bdp():
    d = diagnose(far(0.47))
    assert d.limit == "receive-window"
    window = d.binding.evidence
    assert window["window_bytes"] == 3 * MiB and window["window_fraction"] == 0.5  # 6 MiB × ½ (adv_win_scale 1)
    assert d.binding.gbps == pytest.approx(3 * MiB * 8 / 0.053 / 1e9)  # 0.475 Gbit/s
    # BDP of the path: 3.6 Gbit/s × 53 ms = 23.85 MB; half of tcp_rmem is window, so 2 × BDP
    assert "raise net.ipv4.tcp_rmem max on site-c to at least 2 × BDP = 47.7 MB" in d.fix
    assert "BDP = 3.6 Gbit/s × 53 ms = 23.9 MB per connection" in d.fix
    assert d.efficiency == pytest.approx(0.47 / 3.6)
    assert "site-c" in d.fix and "site-a-1" not in d.fix


def test_the_demos_far_node_at_eight_streams_is_no_node_problem():
    d = diagnose(far(3.6, streams=8))
    assert d.limit in ("receive-window", "network-capacity")
    assert d.limit not in ("source-cpu", "destination-cpu")
    assert d.efficiency == pytest.approx(1.0)


def test_the_far_nodes_own_cpu_is_not_blamed_for_a_window():
    """A busy core beside a flow that sits at its window: the window is named (tie order), not the CPU."""
    busy = replace(SITE_C, busiest_core_percent=97.0)
    d = diagnose(replace(far(0.47), destination=busy))
    assert d.limit == "receive-window"
    assert any(b.limit == "destination-cpu" and b.sits_at for b in d.bounds)


# -- each limit ----------------------------------------------------------------------------------------------------

def test_send_buffer_on_the_source():
    src = replace(SITE_A, tcp_wmem_max=2 * MiB)
    dst = replace(SITE_C, **BIG)
    d = diagnose(replace(far(0.23), source=src, destination=dst))
    assert d.limit == "send-buffer"
    assert "raise net.ipv4.tcp_wmem max on site-a-1" in d.fix
    assert d.binding.evidence["tcp_wmem_max_bytes"] == 2 * MiB
    assert "net.core.wmem_max (now 0.213 MB)" in d.fix


def test_network_capacity_on_a_healthy_long_path_with_large_buffers():
    src, dst = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    d = diagnose(replace(far(3.3), source=src, destination=dst))
    assert d.limit == "network-capacity"
    assert "nothing to fix at the hosts" in d.fix and "92%" in d.fix


def test_a_rate_limited_link_is_network_capacity_at_one_stream_too():
    src, dst = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    d = diagnose(replace(far(0.47), source=src, destination=dst, path=PathCapacity(0.5, 8)))
    assert d.limit == "network-capacity"


def test_loss_is_the_mathis_bound_for_cubic():
    src, dst = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    tcp = Tcp(mss_bytes=8948, retransmits=100, data_segs_out=100_000)  # p = 0.1 %
    expected = 8948 * 1.22 / (0.053 * math.sqrt(0.001)) * 8 / 1e9  # 0.052 Gbit/s
    d = diagnose(replace(far(0.05), source=src, destination=dst, tcp=tcp))
    assert d.limit == "loss"
    assert d.binding.gbps == pytest.approx(expected)
    assert "100 of 100000 segments retransmitted (p = 0.10%)" in d.fix
    assert "needs p ≤" in d.fix


def test_the_loss_bound_allows_for_mathis_constant_and_an_approximate_p():
    """One cubic stream over 53 ms with 0.1 % random loss got up to 2 × its Mathis bound in the lab: still loss; a
    window estimate exceeded by 1.4 × is not."""
    src, dst = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    tcp = Tcp(mss_bytes=8948, retransmits=100, data_segs_out=100_000)
    mathis = 8948 * 1.22 / (0.053 * math.sqrt(0.001)) * 8 / 1e9
    assert diagnose(replace(far(1.9 * mathis), source=src, destination=dst, tcp=tcp)).limit == "loss"
    assert diagnose(replace(far(2.1 * mathis), source=src, destination=dst, tcp=tcp)).limit == "unknown"
    assert diagnose(replace(far(1.4 * 0.475), source=src)).limit == "unknown"  # 1.4 × the receive window


def test_losses_at_the_paths_own_capacity_are_the_path_and_below_it_are_loss():
    src, dst = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    tcp = Tcp(mss_bytes=8948, retransmits=100, data_segs_out=100_000)
    mathis8 = 8 * 8948 * 1.22 / (0.053 * math.sqrt(0.001)) * 8 / 1e9  # 0.42 Gbit/s
    # a rate-limited link: a loss-based sender's drops at the bottleneck put the Mathis bound at the path's rate
    full = diagnose(replace(far(mathis8, streams=8), source=src, destination=dst, tcp=tcp,
                            path=PathCapacity(mathis8 * 1.02, 8)))
    assert full.limit == "network-capacity" and any(b.limit == "loss" and b.sits_at for b in full.bounds)
    # random loss on a path that carries more: loss is the lowest bound it sits at
    lossy = diagnose(replace(far(1.3 * mathis8, streams=8), source=src, destination=dst, tcp=tcp,
                             path=PathCapacity(1.3 * mathis8, 8)))
    assert lossy.limit == "loss"


def test_the_mss_comes_from_the_mtu_when_tcp_info_lacks_it():
    src = replace(SITE_A, **BIG, mtu=1500)
    d = diagnose(replace(far(0.008), source=src, destination=replace(SITE_C, **BIG),
                         tcp=Tcp(retransmits=10, data_segs_out=10_000)))
    assert d.limit == "loss" and d.binding.evidence["mss_bytes"] == 1448


def test_bbr_senders_have_no_loss_bound():
    src = replace(SITE_A, **BIG, congestion_control="bbr")
    tcp = Tcp(mss_bytes=8948, retransmits=100, data_segs_out=100_000)
    d = diagnose(replace(far(0.05), source=src, destination=replace(SITE_C, **BIG), tcp=tcp))
    assert not any(b.limit == "loss" for b in d.bounds)
    assert d.limit == "unknown"


def test_no_retransmits_no_loss_bound():
    d = diagnose(replace(far(0.47), tcp=Tcp(mss_bytes=8948, retransmits=0, data_segs_out=10_000)))
    assert not any(b.limit == "loss" for b in d.bounds)


@pytest.mark.parametrize("role", ["source", "destination"])
def test_a_saturated_core_names_its_end(role):
    big_a, big_c = replace(SITE_A, **BIG), replace(SITE_C, **BIG)
    hosts = {"source": big_a, "destination": big_c}
    hosts[role] = replace(hosts[role], busiest_core_percent=99.0)
    d = diagnose(replace(far(1.2), source=hosts["source"], destination=hosts["destination"]))
    assert d.limit == f"{role}-cpu"
    assert "99 % busy (softirq included)" in d.fix and hosts[role].name in d.fix


def test_a_used_up_cpu_quota_names_its_end():
    dst = replace(SITE_C, **BIG, busiest_core_percent=40.0, cpu_quota_used_percent=98.0)
    d = diagnose(replace(far(0.9), source=replace(SITE_A, **BIG), destination=dst))
    assert d.limit == "destination-cpu" and "98 % of their CPU quota" in d.fix


def test_a_quota_that_ran_out_names_its_end():
    """cgroup v1 gives no usage of the group, only its throttled periods: those are the evidence."""
    src = replace(SITE_A, **BIG, busiest_core_percent=20.0, cpu_throttled_percent=88.0)
    d = diagnose(replace(far(0.9), source=src, destination=replace(SITE_C, **BIG)))
    assert d.limit == "source-cpu" and "quota ran out in 88 % of its periods" in d.fix
    assert d.binding.evidence == {"cpu_throttled_percent": 88.0}


def test_a_quota_rarely_throttled_is_no_evidence():
    src = replace(SITE_A, **BIG, busiest_core_percent=20.0, cpu_throttled_percent=10.0)
    d = diagnose(replace(far(0.9), source=src, destination=replace(SITE_C, **BIG)))
    assert d.limit != "source-cpu"


def test_a_busy_core_shared_with_other_nodes_is_not_the_nodes():
    """The WAN lab runs every node on one machine's cores: a core 100 % busy there is the machine's, and the model
    says the figure it lacks instead of blaming the node."""
    src = replace(SITE_A, **BIG, busiest_core_percent=100.0, cores_shared=True)
    d = diagnose(replace(far(0.9), source=src, destination=replace(SITE_C, **BIG)))
    assert d.limit != "source-cpu"
    assert any("the busiest core of site-a-1 (its cores are shared with other nodes)" in m for m in d.missing)


def test_a_low_loopback_ceiling_names_its_end():
    src = replace(SITE_A, **BIG, loopback_gbps=1.0)
    d = diagnose(replace(far(0.95), source=src, destination=replace(SITE_C, **BIG)))
    assert d.limit == "source-cpu" and "reaches only 1 Gbit/s to itself" in d.fix


# -- disk mode (#28): each end's storage, by its fio ceiling or by its tax against memory to memory --------------

def on_disk(host: Host, **kw) -> Host:
    return replace(host, **BIG, storage="disk", **kw)


def test_a_slow_disk_write_ceiling_binds_the_destination():
    d = diagnose(replace(far(0.8), source=replace(SITE_A, **BIG), destination=on_disk(SITE_C, disk_write_gbps=0.85)))
    assert d.limit == "destination-storage"
    assert d.binding.evidence == {"disk_write_gbps": 0.85}
    assert d.fix.startswith("site-c's disk path writes only 0.85 Gbit/s (fio")


def test_a_disk_ceiling_of_an_end_that_kept_its_files_in_memory_is_no_bound():
    d = diagnose(replace(far(0.8), source=replace(SITE_A, **BIG, disk_read_gbps=0.8),
                         destination=replace(SITE_C, **BIG, disk_write_gbps=0.85)))
    assert not any(b.limit.endswith("-storage") for b in d.bounds)
    assert not any("disk" in x for x in d.missing)


def test_the_storage_tax_names_the_end_whose_disk_costs_the_rate():
    # disk to disk at 1.1: the source's disk alone gets 1.2 (disk→memory), the destination's 3.3 (memory→disk), of
    # 3.4 memory to memory; no fio figures: the tax alone names the source
    d = diagnose(replace(far(1.1), source=on_disk(SITE_A), destination=on_disk(SITE_C), memory_gbps=3.4,
                         source_disk_gbps=1.2, destination_disk_gbps=3.3))
    assert d.limit == "source-storage"
    assert d.binding.evidence == {"memory_gbps": 3.4, "source_disk_gbps": 1.2, "storage_tax": 0.647}
    assert d.fix.startswith("site-a-1's storage costs 65% of this pair's rate: 1.2 Gbit/s with its disk against "
                            "3.4 Gbit/s memory to memory; the disk path's own read ceiling (fio) is missing")
    assert "the disk read ceiling of site-a-1 (fio)" in d.missing
    # the destination's disk keeps 97 % of the memory rate: no bound of its own
    assert not any(b.limit == "destination-storage" for b in d.bounds)


def test_a_disk_to_memory_cell_is_its_own_storage_tax():
    d = diagnose(replace(far(1.2), source=on_disk(SITE_A, disk_read_gbps=1.25), destination=replace(SITE_C, **BIG),
                         memory_gbps=3.4))
    assert d.limit == "source-storage"
    taxed = [b for b in d.bounds if "storage_tax" in b.evidence]
    assert [b.gbps for b in taxed] == [1.2]
    assert "its disk path reads 1.25 Gbit/s (fio), so the device is the ceiling" in taxed[0].fix


def test_a_disk_end_without_the_memory_rate_says_what_is_missing():
    d = diagnose(replace(far(1.2), source=on_disk(SITE_A), destination=replace(SITE_C, **BIG)))
    assert "this pair's memory-to-memory rate (a run with spec.storage both)" in d.missing
    assert "the disk read ceiling of site-a-1 (fio)" in d.missing


def test_a_disk_that_costs_little_leaves_the_path_binding():
    d = diagnose(replace(far(3.3), source=on_disk(SITE_A), destination=replace(SITE_C, **BIG), memory_gbps=3.4,
                         path=PathCapacity(3.4, 8)))
    assert d.limit == "network-capacity"


def test_protocol_when_the_builtin_mover_gets_much_more_and_nothing_else_binds():
    big = {"source": replace(SITE_A, **BIG), "destination": replace(SITE_C, **BIG)}
    slow = diagnose(replace(far(1.0, protocol="xrootd-https"), builtin_gbps=3.0, **big))
    assert slow.limit == "protocol"
    assert "the built-in mover gets 3 Gbit/s on the same pair and streams, xrootd-https 1 Gbit/s (33%)" in slow.fix
    same = diagnose(replace(far(2.9, protocol="xrootd-https"), builtin_gbps=3.0, path=PathCapacity(6.0, 8), **big))
    assert same.limit == "unknown"  # the protocol costs nothing here: whatever holds the built-in mover holds it too


def test_the_builtin_mover_is_not_compared_with_itself():
    d = diagnose(replace(far(1.0, protocol="builtin"), builtin_gbps=3.0))
    assert not any(b.limit == "protocol" for b in d.bounds)
    assert not any("built-in mover" in x for x in d.missing)


# -- the kernel's window fractions ---------------------------------------------------------------------------------

def test_the_kernels_fractions_decide_between_receive_window_and_send_buffer():
    """Both windows are ~3 MB (a tie the order would give to receive-window); the sender says it waited on its
    send buffer."""
    d = diagnose(replace(far(0.47), tcp=Tcp(rwnd_limited=0.05, sndbuf_limited=0.8)))
    assert d.limit == "send-buffer"
    assert "send buffer 80%" in d.reason
    d = diagnose(replace(far(0.47), tcp=Tcp(rwnd_limited=0.87, sndbuf_limited=0.0)))
    assert d.limit == "receive-window" and "receive window 87%" in d.reason


def test_a_network_limited_flow_is_not_given_a_window():
    d = diagnose(replace(far(0.47), tcp=Tcp(rwnd_limited=0.02, sndbuf_limited=0.03)))
    assert d.limit not in ("receive-window", "send-buffer")


def test_a_window_the_kernel_names_binds_without_the_limits_and_names_what_is_missing():
    m = Measurement(gbps=0.47, rtt_ms=53.0, tcp=Tcp(rwnd_limited=0.9, sndbuf_limited=0.0),
                    destination=Host(name="site-c"))
    d = diagnose(m)
    assert d.limit == "receive-window"
    assert "raise net.ipv4.tcp_rmem max on site-c" in d.fix and "tcp_rmem max of site-c" in d.fix


# -- the window's reading of the kernel ----------------------------------------------------------------------------

def test_receive_window_fraction_by_kernel():
    assert receive_window_fraction(Host(kernel="5.15.0", tcp_adv_win_scale=1))[0] == 0.5
    assert receive_window_fraction(Host(kernel="5.15.0", tcp_adv_win_scale=2))[0] == 0.75
    assert receive_window_fraction(Host(kernel="4.19.0", tcp_adv_win_scale=-2))[0] == 0.25
    assert receive_window_fraction(Host(kernel="4.19.0"))[0] == 0.5  # the default adv_win_scale
    assert receive_window_fraction(Host(kernel="6.18.44", tcp_adv_win_scale=1))[0] == 0.8  # obsolete from 6.6
    assert receive_window_fraction(Host(kernel="6.18.44", receive_window_fraction=0.95))[0] == 0.95
    assert receive_window_fraction(Host(tcp_adv_win_scale=1)) is None


def test_without_the_kernel_release_tcp_rmem_is_not_read_as_a_window():
    dst = replace(SITE_C, kernel=None)
    d = diagnose(replace(far(0.47), destination=dst, source=replace(SITE_A, **BIG)))
    assert not any(b.limit == "receive-window" for b in d.bounds)
    assert "the kernel release of site-c (to read tcp_rmem as a window)" in d.missing
    assert d.limit == "unknown" and "kernel release of site-c" in d.reason


def test_an_observed_window_larger_than_the_limits_widens_the_bound():
    d = diagnose(replace(far(0.9), tcp=Tcp(rcv_space_bytes=6_000_000)))
    receive = next(b for b in d.bounds if b.limit == "receive-window")
    assert receive.evidence["window_bytes"] == 6_000_000 and "observed" in receive.basis


def test_a_large_cwnd_does_not_widen_the_window():
    """BBR's cwnd is twice its BDP estimate whatever the windows: a cap, not data in flight."""
    d = diagnose(replace(far(0.47), tcp=Tcp(cwnd_max_bytes=12_000_000)))
    assert d.limit == "receive-window" and d.binding.evidence["window_bytes"] == 3 * MiB


def test_a_saturated_cpu_binds_even_above_a_lower_path_figure():
    """A starved destination's own 8-stream iperf3 (the path figure) came out lower than its 1-stream test: the
    host's evidence is named, not the path."""
    dst = replace(SITE_C, **BIG, cpu_quota_used_percent=97.0)
    d = diagnose(replace(far(0.557), source=replace(SITE_A, **BIG), destination=dst, path=PathCapacity(0.497, 8)))
    assert d.limit == "destination-cpu"


def test_connections_are_streams_times_files_in_flight():
    m = replace(far(3.0, streams=2), files=11, concurrency=4)
    assert m.connections == 8
    receive = next(b for b in diagnose(m).bounds if b.limit == "receive-window")
    assert receive.gbps == pytest.approx(8 * 3 * MiB * 8 / 0.053 / 1e9)


# -- the binding rule ----------------------------------------------------------------------------------------------

def test_a_bound_well_above_the_measurement_does_not_bind_nor_one_exceeded_by_a_lot():
    assert diagnose(replace(far(0.30))).limit == "unknown"  # 63 % of the 0.475 window: no bound
    # 0.7 exceeds the 0.475 window by 47 %: the window estimate was too low, it explains nothing
    d = diagnose(replace(far(0.7), source=replace(SITE_A, **BIG)))
    assert d.limit == "unknown"


def test_ties_go_by_the_order_and_a_clearly_lower_bound_wins():
    big_src = replace(SITE_A, **BIG)
    # window 0.475 and path 0.5 within 10 %: the window comes first in the order
    tie = diagnose(replace(far(0.46), source=big_src, path=PathCapacity(0.5, 8)))
    assert tie.limit == "receive-window"
    # path 0.42, window 0.475: 13 % apart, the lower (the path) binds
    lower = diagnose(replace(far(0.41), source=big_src, path=PathCapacity(0.42, 8)))
    assert lower.limit == "network-capacity"


def test_nothing_known_is_unknown_with_every_missing_figure_named():
    d = diagnose(Measurement(gbps=1.0, protocol="xrootd-https"))
    assert d.limit == "unknown" and d.binding is None and d.fix is None and d.efficiency is None
    for figure in ("iperf3 capacity", "RTT", "tcp_rmem max of the destination", "tcp_wmem max of the source",
                   "retransmits", "loopback ceiling of the source", "busiest core of the destination",
                   "built-in mover on this pair at 1 stream"):
        assert any(figure in x for x in d.missing), figure
        assert figure in d.reason


def test_bad_rates_are_refused():
    with pytest.raises(ValueError, match="gbps must be a finite rate"):
        diagnose(Measurement(gbps=float("nan")))


def test_the_diagnosis_is_json():
    d = json.loads(json.dumps(diagnose(far(0.47)).to_dict()))
    assert d["limit"] == "receive-window" and d["fix"].startswith("raise")
    assert {b["limit"] for b in d["bounds"]} >= {"network-capacity", "receive-window", "send-buffer"}


# -- properties ----------------------------------------------------------------------------------------------------

rates = st.floats(min_value=0.001, max_value=400.0, allow_nan=False)

hosts = st.builds(
    Host, name=st.sampled_from([None, "a", "b"]), kernel=st.sampled_from([None, "5.10.0", "6.1.0", "6.18.4"]),
    tcp_rmem_max=st.none() | st.integers(4096, 1 << 30), tcp_wmem_max=st.none() | st.integers(4096, 1 << 30),
    tcp_adv_win_scale=st.none() | st.integers(-3, 3), congestion_control=st.sampled_from([None, "cubic", "bbr"]),
    mtu=st.none() | st.integers(1280, 65000), loopback_gbps=st.none() | rates,
    busiest_core_percent=st.none() | st.floats(0, 100), cpu_quota_used_percent=st.none() | st.floats(0, 100),
    storage=st.sampled_from(["memory", "disk"]), disk_read_gbps=st.none() | rates, disk_write_gbps=st.none() | rates)
tcps = st.builds(
    Tcp, cwnd_max_bytes=st.none() | st.integers(1, 1 << 30), mss_bytes=st.none() | st.integers(500, 65000),
    retransmits=st.none() | st.integers(0, 10_000), data_segs_out=st.none() | st.integers(0, 10**7),
    rwnd_limited=st.none() | st.floats(0, 0.5), sndbuf_limited=st.none() | st.floats(0, 0.5))
measurements = st.builds(
    Measurement, gbps=rates, protocol=st.sampled_from(["builtin", "iperf3", "xrootd-https"]),
    streams=st.integers(1, 16), files=st.integers(1, 11), concurrency=st.none() | st.integers(1, 11),
    rtt_ms=st.none() | st.floats(0.05, 300), source=hosts, destination=hosts, tcp=tcps,
    path=st.none() | st.builds(PathCapacity, gbps=rates, streams=st.integers(1, 16)),
    builtin_gbps=st.none() | rates, memory_gbps=st.none() | rates, source_disk_gbps=st.none() | rates,
    destination_disk_gbps=st.none() | rates)


@settings(max_examples=300, deadline=None)
@given(measurements)
def test_every_diagnosis_is_a_known_limit_at_a_bound_or_says_what_is_missing(m):
    d = diagnose(m)
    assert d.limit in LIMITS
    if d.path_gbps:
        assert d.efficiency == pytest.approx(m.gbps / m.path.gbps)
    if d.limit == "unknown":
        assert d.binding is None and not any(b.sits_at for b in d.bounds if b.limit in TIE_ORDER
                                             and b.limit not in ("receive-window", "send-buffer"))
    elif d.limit == "protocol":
        assert m.gbps <= 0.8 * m.builtin_gbps
    elif d.binding.basis.startswith("the kernel"):
        assert d.limit in ("receive-window", "send-buffer")
    else:
        assert d.binding.sits_at and d.binding.ratio >= AT_BOUND
        lowest = min(b.gbps for b in d.bounds if b.sits_at and b.limit in TIE_ORDER
                     and (b.limit not in ("receive-window", "send-buffer") or m.tcp.rwnd_limited is None
                          and m.tcp.sndbuf_limited is None or b.limit == d.limit))
        assert d.binding.direct or d.binding.gbps <= lowest * (1 + TIE_BAND) + 1e-12


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.floats(1, 300), st.integers(64 * 1024, 1 << 28))
def test_the_window_bound_scales_with_streams_and_inversely_with_rtt(streams, rtt, rmem):
    m = Measurement(gbps=0.1, streams=streams, rtt_ms=rtt, destination=Host(kernel="5.10", tcp_rmem_max=rmem))
    bound = next(b for b in diagnose(m).bounds if b.limit == "receive-window")
    assert bound.gbps == pytest.approx(streams * rmem * 0.5 * 8 / (rtt / 1000) / 1e9)
    doubled = next(b for b in diagnose(replace(m, rtt_ms=2 * rtt)).bounds if b.limit == "receive-window")
    assert doubled.gbps == pytest.approx(bound.gbps / 2)
