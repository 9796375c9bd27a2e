"""Where the lab finds a cgroup that can hold a node's CPU quota (lab/tpcmesh_lab/hostlimits.py), on directory trees
shaped like the three layouts: cgroup v2 alone, hybrid with cpu on v1 (this project's machines), and neither."""

from __future__ import annotations

from tpcmesh_lab.hostlimits import cpu_hierarchy, lab_groups


def test_cgroup_v2_with_the_cpu_controller_for_children(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    h = cpu_hierarchy(tmp_path)
    assert h is not None and (h.version, h.root) == (2, tmp_path)


def test_cgroup_v2_without_cpu_for_children_is_not_used_and_v1_is(tmp_path):
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    (tmp_path / "unified" / "cgroup.subtree_control").write_text("\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    h = cpu_hierarchy(tmp_path)
    assert h is not None and (h.version, h.root) == (1, tmp_path / "cpu")
    assert h.describe() == f"cgroup v1 at {tmp_path / 'cpu'}"


def test_no_cpu_controller_anywhere(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    assert cpu_hierarchy(tmp_path) is None


def test_the_labs_groups_are_found_in_every_hierarchy(tmp_path):
    for d in ("tpcm-1-a", "unified/tpcm-2-b", "cpu/tpcm-3-c", "cpu/other"):
        (tmp_path / d).mkdir(parents=True)
    assert sorted(p.name for p in lab_groups("tpcm-", tmp_path)) == ["tpcm-1-a", "tpcm-2-b", "tpcm-3-c"]
