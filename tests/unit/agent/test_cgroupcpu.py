"""The agent's cgroup CPU quota (cgroupcpu) read from cgroup trees laid out as the kernel lays them out, v2 and v1;
the real kernel's counters are read in tests/integration/lab/test_lab_hostlimits.py (a quota'd lab node)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tpcmesh_agent import cgroupcpu
from tpcmesh_agent.cgroupcpu import QuotaCounters


def tree(top: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)


def test_v2_the_nearest_group_with_a_quota_counts(tmp_path):
    root = tmp_path / "cgroup"
    tree(root, {"cgroup.controllers": "cpu io memory\n", "kubepods/pod1/cpu.max": "50000 100000\n",
                "kubepods/pod1/cpu.stat": "usage_usec 2000000\nnr_periods 40\nnr_throttled 30\n",
                "kubepods/pod1/agent/cpu.max": "max 100000\n",
                "kubepods/pod1/agent/cpu.stat": "usage_usec 1\nnr_periods 0\nnr_throttled 0\n"})
    tree(tmp_path, {"proc-cgroup": "0::/kubepods/pod1/agent\n"})
    got = cgroupcpu.read(root, tmp_path / "proc-cgroup")
    assert got == QuotaCounters(cores=0.5, periods=40, throttled=30, usage_us=2_000_000)


def test_v1_reads_cfs_quota_and_throttling_without_usage(tmp_path):
    root = tmp_path / "cgroup"
    v1 = "cpu,cpuacct/"
    tree(root, {v1 + "node-b/cpu.cfs_quota_us": "25000\n", v1 + "node-b/cpu.cfs_period_us": "100000\n",
                v1 + "node-b/cpu.stat": "nr_periods 10\nnr_throttled 9\nthrottled_time 123\n",
                v1 + "cpu.cfs_quota_us": "-1\n", v1 + "cpu.cfs_period_us": "100000\n"})
    tree(tmp_path, {"proc-cgroup": "4:memory:/x\n2:cpu,cpuacct:/node-b\n0::/\n"})
    assert cgroupcpu.read(root, tmp_path / "proc-cgroup") == QuotaCounters(0.25, 10, 9, None)


def test_no_quota_anywhere_is_none(tmp_path):
    root = tmp_path / "cgroup"
    tree(root, {"cgroup.controllers": "cpu\n", "cpu.max": "max 100000\n"})
    tree(tmp_path, {"proc-cgroup": "0::/\n"})
    assert cgroupcpu.read(root, tmp_path / "proc-cgroup") is None
    assert cgroupcpu.read(root, tmp_path / "missing") is None


def test_summary_of_a_window():
    first, last = QuotaCounters(0.5, 100, 10, 1_000_000), QuotaCounters(0.5, 120, 28, 1_950_000)
    assert cgroupcpu.summary(first, last, 2.0) == {"cores": 0.5, "throttled_pct": 90.0, "used_pct": 95.0}
    assert cgroupcpu.summary(QuotaCounters(0.25, 1, 0, None), QuotaCounters(0.25, 5, 2, None), 1.0) == {
        "cores": 0.25, "throttled_pct": 50.0, "used_pct": None}
    assert cgroupcpu.summary(None, last, 2.0) is None


@pytest.mark.parametrize("shared", [False, True])
def test_the_host_summary_carries_the_quota_and_whether_cores_are_shared(shared):
    from tpcmesh_agent.hosttelemetry import Sample, summarize
    core = (1.0, 0.0, 1.0, 8.0, 0.0, 0.0, 0.0, 0.0)
    later = (2.0, 0.0, 2.0, 16.0, 0.0, 0.0, 0.0, 0.0)
    a = Sample(t=100.0, cpu=(core,), quota=QuotaCounters(1.0, 10, 0, 0))
    b = Sample(t=101.0, cpu=(later,), quota=QuotaCounters(1.0, 20, 5, 400_000))
    cpu = summarize([a, b], cpu_shared=shared)["cpu"]
    assert cpu["quota"] == {"cores": 1.0, "throttled_pct": 50.0, "used_pct": 40.0}
    assert cpu.get("shared", False) is shared
