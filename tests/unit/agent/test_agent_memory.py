"""The memory guard: what the node can give (meminfo, cgroup v2), memory-backed directories, and the refusal."""

from __future__ import annotations

from pathlib import Path

from tpcmesh_agent import memory
from tpcmesh_agent.movers.base import Endpoint, FileSpec, Mover, TransferJob
from tpcmesh_agent.movers.xrootd_https import XrootdHttpsMover
from tpcmesh_agent.runner import memory_shortfall

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /run tmpfs rw 0 0
/dev/vdb /data xfs rw 0 0
none /data/ram\\040disk ramfs rw 0 0
"""


def fake_proc(tmp: Path, available_kib: int, cgroup_line: str = "0::/") -> Path:
    proc = tmp / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   {available_kib} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def test_available_is_meminfo_without_a_cgroup_limit(tmp_path):
    proc = fake_proc(tmp_path, 13_000_000)
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text("max\n")
    (root / "memory.current").write_text("5\n")
    assert memory.available_bytes(proc, root) == 13_000_000 * 1024


def test_a_pods_cgroup_limit_bounds_what_is_available(tmp_path):
    proc = fake_proc(tmp_path, 13_000_000, "0::/kubepods/pod1/agent")
    group = tmp_path / "cgroup" / "kubepods" / "pod1" / "agent"
    group.mkdir(parents=True)
    (group / "memory.max").write_text(f"{4 * 2**30}\n")
    (group / "memory.current").write_text(f"{2**30}\n")
    assert memory.available_bytes(proc, tmp_path / "cgroup") == 3 * 2**30


def test_nothing_readable_means_unknown(tmp_path):
    assert memory.available_bytes(tmp_path / "none", tmp_path / "none") is None


def test_filesystem_type_takes_the_longest_mount_point():
    assert memory.filesystem_type(Path("/dev/shm/agent/incoming"), MOUNTS) == "tmpfs"
    assert memory.filesystem_type(Path("/dev/shmx"), MOUNTS) == "ext4"
    assert memory.filesystem_type(Path("/data/ram disk/x"), MOUNTS) == "ramfs"
    assert memory.filesystem_type(Path("/data/x"), MOUNTS) == "xfs"
    assert memory.memory_backed(Path("/run/x"), MOUNTS)
    assert not memory.memory_backed(Path("/data/x"), MOUNTS)


def job(size: int, count: int, concurrency: int, streams: int, store: Path | None) -> TransferJob:
    return TransferJob(test_id="t", protocol="xrootd-https", source=Endpoint("127.0.0.1", 1),
                       files=tuple(FileSpec(f"f{i}", size, None) for i in range(count)), file_set="s",
                       concurrency=concurrency, streams=streams, timeout=60, destination_dir=store)


def test_xrootd_multistream_buffers_grow_with_streams_and_files_in_flight():
    mover = XrootdHttpsMover(settings=None)
    mib16 = 16 * 2**20
    # 1 GB file: 60 blocks of 16 MiB at most (the whole file), whatever the stream count above 3
    need, why = mover.memory_needed(job(10**9, 11, 11, 8, None))
    assert need == 11 * 60 * mib16
    assert "16 blocks of 16 MiB per stream" in why and "11 files in flight" in why
    # 64 GB files with 2 streams: 2 x 16 blocks each, only the 3 files in flight count
    assert mover.memory_needed(job(64 * 10**9, 11, 3, 2, None))[0] == 3 * 32 * mib16
    # one stream: 16 blocks of 1 MiB
    assert mover.memory_needed(job(10**9, 11, 11, 1, None))[0] == 11 * 16 * 2**20


class Small(Mover):
    protocol = "builtin"

    async def run(self, job, progress):  # pragma: no cover - never run here
        raise AssertionError


def test_shortfall_names_the_figures_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "available_bytes", lambda: 13 * 10**9)
    monkeypatch.setattr(memory, "memory_backed", lambda path: True)
    why = memory_shortfall(job(10**9, 11, 11, 8, tmp_path / "t"), XrootdHttpsMover(None), tmp_path)
    assert why is not None
    assert "needs up to 22.1 GB" in why and "11.0 GB stored in the memory-backed" in why
    assert "XRootD's multi-stream HTTP-TPC" in why and "13.0 GB available" in why
    assert "lower concurrency or streams" in why
    # the same set with one stream fits; a sink stores nothing
    assert memory_shortfall(job(10**9, 11, 11, 1, tmp_path / "t"), XrootdHttpsMover(None), tmp_path) is None
    assert memory_shortfall(job(10**9, 20, 20, 8, None), Small(), tmp_path) is None
    # stored files on a disk-backed directory go to the page cache, which the kernel can reclaim
    monkeypatch.setattr(memory, "memory_backed", lambda path: False)
    assert memory_shortfall(job(10**9, 20, 20, 1, tmp_path / "t"), Small(), tmp_path) is None
    monkeypatch.setattr(memory, "memory_backed", lambda path: True)
    assert "20.0 GB stored" in memory_shortfall(job(10**9, 20, 20, 1, tmp_path / "t"), Small(), tmp_path)


def test_builtin_disk_writes_count_their_buffers_per_connection():
    """The built-in mover's disk landing holds DEPTH aligned buffers per connection (files in flight x streams);
    memory mode's splice pipes count as nothing."""
    from dataclasses import replace

    from tpcmesh_agent.directio import BLOCK, DEPTH
    from tpcmesh_agent.movers.builtin import BuiltinMover
    from tpcmesh_agent.storage import Storage

    mover = BuiltinMover(settings=None)
    disk = replace(job(10**9, 11, 11, 8, Path("/d")), storage=Storage("disk", "disk"))
    need, why = mover.memory_needed(disk)
    assert need == 88 * DEPTH * BLOCK and "88 connections" in why
    assert mover.memory_needed(replace(disk, concurrency=20, files=disk.files[:3]))[0] == 24 * DEPTH * BLOCK
    assert mover.memory_needed(replace(disk, storage=Storage("disk", "memory"))) is None
    assert mover.memory_needed(job(10**9, 11, 11, 8, Path("/d"))) is None
