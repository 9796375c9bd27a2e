"""Disk mode's pure parts: the storage field, aligned ranges, fio's JSON, the disk path checks on real paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tpcmesh_agent.ceilings import CeilingError, FioPlan, SharedDevicePlan, parse_fio, same_device, whole_disk
from tpcmesh_agent.config import SettingsError, load_settings
from tpcmesh_agent.movers.builtin.client import split_ranges
from tpcmesh_agent.storage import Storage, disk_problem, entry_problem, parse_storage, space_problem


def test_storage_field():
    assert parse_storage(None) == Storage("memory", "memory")
    assert parse_storage("disk") == Storage("disk", "disk")
    assert parse_storage({"destination": "disk"}) == Storage("memory", "disk")
    assert parse_storage({"source": "disk"}).disk and not parse_storage("memory").disk
    for bad, words in (("ssd", "storage must be one of memory, disk"), (3, "storage must be one of"),
                       ({"source": "nvme"}, "storage.source must be one of memory, disk, got 'nvme'"),
                       ({"sink": "disk"}, "or an object {source, destination}")):
        with pytest.raises(ValueError, match=words.replace("{", r"\{").replace("}", r"\}")):
            parse_storage(bad)


def test_aligned_ranges_start_on_block_boundaries_and_cover_the_file():
    size = 10_000_019
    for streams in (1, 3, 8, 100):
        ranges = split_ranges(size, streams, 4096)
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(a % 4096 == 0 for a, _ in ranges)
        assert all(b == c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))
        assert len(ranges) <= streams
    assert split_ranges(5000, 8, 4096) == [(0, 4096), (4096, 5000)]
    assert split_ranges(5000, 8) == [(i * 625, (i + 1) * 625) for i in range(8)]  # unaligned as before


def test_fio_plan_and_its_json():
    argv = FioPlan(Path("/data/fio"), 4, 2**20, 30).argv()
    assert {"--direct=1", "--bs=1M", "--numjobs=4", "--size=1048576", "--rw=write", "--rw=read",
            "--stonewall", "--end_fsync=1", "--group_reporting"} <= set(argv)
    out = "note: a line fio prints first\n" + json.dumps({"jobs": [
        {"jobname": "write", "write": {"bw_bytes": 20_000_000}, "read": {"bw_bytes": 0}},
        {"jobname": "read", "write": {"bw_bytes": 0}, "read": {"bw_bytes": 90_000_000}}]})
    assert parse_fio(out) == {"write_bps": 20e6, "read_bps": 90e6}
    with pytest.raises(CeilingError, match="fio's output could not be read"):
        parse_fio('{"jobs": []}')


def test_disk_path_checks(tmp_path):
    assert disk_problem("n1", None) == "node n1 has no disk path (set disk_dir, TPCMESH_AGENT_DISK_DIR)"
    assert disk_problem("n1", tmp_path / "no") == f"node n1: disk path {tmp_path / 'no'} does not exist"
    (tmp_path / "f").write_text("x")
    assert disk_problem("n1", tmp_path / "f") == f"node n1: disk path {tmp_path / 'f'} is not a directory"
    assert "is memory-backed (tmpfs)" in (disk_problem("n1", Path("/dev/shm")) or "")
    free = space_problem("n1", tmp_path, 2**62, 5)
    assert free is not None and free.startswith(f"node n1: disk path {tmp_path} has ") and \
        f"{2**62} bytes needed plus a reserve of 5 bytes do not fit" in free
    assert space_problem("n1", tmp_path, 1, 0) is None


def test_disk_settings(tmp_path):
    token = tmp_path / "token"
    token.write_text("x" * 32)
    base = ["--allow-plain-http", "1", "--token-file", str(token)]
    s = load_settings([*base, "--disk-dir", str(tmp_path), "--disk-reserve-bytes", "2GiB"], {})
    assert (s.disk_dir, s.disk_reserve_bytes, s.storage_dir("disk")) == (tmp_path, 2 * 2**30, tmp_path)
    assert load_settings(base, {}).disk_dir is None
    with pytest.raises(SettingsError, match="disk_dir is not set"):
        load_settings(base, {}).storage_dir("disk")
    with pytest.raises(SettingsError, match="disk_reserve_bytes -1 must be >= 0"):
        load_settings([*base, "--disk-reserve-bytes", "-1"], {})


@pytest.fixture
def open_dir():
    """A directory everyone may enter, below /var/tmp (pytest's own tmp_path sits below a 0700 one)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="tpcmesh-entry-", dir="/var/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_disk_path_the_servers_user_cannot_enter_is_named_with_the_directory_that_keeps_it_out(open_dir):
    """XRootD and GridFTP run as run_user: a disk path below a directory it cannot search (mkdtemp's 0700) would
    fail mid-test with "permission denied"; the agent names the directory up front."""
    outer = open_dir / "outer"
    disk = outer / "disk"
    disk.mkdir(parents=True)
    outer.chmod(0o700)
    nobody = (65534, 65534)
    assert entry_problem("dtn-a", disk, *nobody) == (
        f"node dtn-a: disk path {disk}: the protocol servers' user (uid 65534) cannot enter {outer} (mode 0700, "
        f"owner uid {outer.stat().st_uid}); let it in (o+x) or use the builtin protocol")
    outer.chmod(0o711)
    assert entry_problem("dtn-a", disk, *nobody) is None
    assert entry_problem("dtn-a", disk, outer.stat().st_uid, 12345) is None  # the owner may enter its own
    outer.chmod(0o700)
    assert entry_problem("dtn-a", disk, 0, 0) is None  # root enters anything


def test_shared_device_plan_runs_readers_and_writers_at_once_held_in_step():
    argv = SharedDevicePlan(Path("/s/fio"), Path("/d/fio"), 8, 2**20, 10).argv()
    assert {"--direct=1", "--bs=1M", "--numjobs=8", "--size=1048576", "--time_based", "--runtime=10", "--flow=1",
            "--directory=/s/fio", "--directory=/d/fio"} <= set(argv)
    assert "--stonewall" not in argv  # both groups run together
    # reads in the source's directory, writes in the destination's, each its own group (parse_fio's names)
    assert argv.index("--name=read") < argv.index("--directory=/s/fio") < argv.index("--name=write") \
        < argv.index("--new_group") < argv.index("--directory=/d/fio")


def test_whole_disk_names_a_partitions_parent_and_nothing_for_devices_sysfs_lacks(tmp_path):
    """A sysfs-shaped tree: /sys/dev/block/M:m links into /sys/devices/.../<disk>[/<partition>]."""
    devices = tmp_path / "devices" / "virtio0" / "sda"
    (devices / "sda2").mkdir(parents=True)
    (devices / "sda2" / "partition").write_text("2\n")
    block = tmp_path / "dev" / "block"
    block.mkdir(parents=True)
    (block / "8:0").symlink_to(devices)
    (block / "8:2").symlink_to(devices / "sda2")
    assert whole_disk(os.makedev(8, 2), block) == "sda"
    assert whole_disk(os.makedev(8, 0), block) == "sda"
    assert whole_disk(os.makedev(0, 45), block) is None  # tmpfs, overlayfs: no block device
    assert same_device(tmp_path, tmp_path / "devices")  # one filesystem
