"""Congestion control names against this kernel's own answer."""

from __future__ import annotations

from tpcmesh_agent import congestion


def test_the_kernels_algorithms_are_read_from_proc(tmp_path):
    (tmp_path / "tcp_congestion_control").write_text("bbr\n")
    (tmp_path / "tcp_available_congestion_control").write_text("reno bbr cubic\n")
    (tmp_path / "tcp_allowed_congestion_control").write_text("reno bbr\n")
    assert congestion.kernel_algorithms(tmp_path) == {"default": "bbr", "available": ["reno", "bbr", "cubic"],
                                                      "allowed": ["reno", "bbr"]}
    assert congestion.kernel_algorithms(tmp_path / "missing") == {"default": None, "available": [], "allowed": []}


def test_the_default_algorithm_is_usable_and_a_made_up_one_is_refused_naming_the_kernels():
    default = congestion.kernel_algorithms()["default"]
    assert default and congestion.problem(default) is None
    why = congestion.problem("warp9")
    assert why is not None and "'warp9' is not usable on this node" in why and default in why
    assert "must be an algorithm name" in (congestion.problem("bbr; reboot") or "")
    assert "must be an algorithm name" in (congestion.problem(7) or "")
