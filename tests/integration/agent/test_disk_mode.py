"""Disk mode with two real agents on the real disk: the built-in mover reads the source's disk copy with O_DIRECT
and writes the destination's with O_DIRECT and fsync; checksums prove the content. Safety refusals name the node,
the path and the figures; the storage ceilings come from a real fio run."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.agent.test_builtin_transfers import check_record

pytestmark = pytest.mark.integration

SIZE = 3_000_017  # odd: the last block of each file is unaligned (written through the tail descriptor)


def _real_disk_dir() -> Iterator[Path]:
    """A directory on the machine's real disk (not /tmp if that is tmpfs elsewhere: /var/tmp)."""
    d = Path(tempfile.mkdtemp(prefix="tpcmesh-disk-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


disk_dir = pytest.fixture(_real_disk_dir)
pair_dir = pytest.fixture(scope="module")(_real_disk_dir)


@pytest.fixture(scope="module")
def disk_pair(module_agent_factory, pair_dir) -> tuple:
    """Two agents whose disk paths are pair_dir/src and pair_dir/dst, shared by the module's tests (each test
    uses sets of its own and leaves nothing in incoming/)."""
    (pair_dir / "src").mkdir()
    (pair_dir / "dst").mkdir()
    return tuple(module_agent_factory(disk_dir=pair_dir / end, disk_reserve_bytes="1M") for end in ("src", "dst"))


@pytest.mark.parametrize("streams", [1, 8])
def test_builtin_disk_to_disk_writes_real_files_cold_and_checksummed(disk_pair, pair_dir, streams):
    src, dst = disk_pair
    fs = src.file_set(count=3, size=SIZE, storage="disk")
    assert fs["storage"] == "disk"
    files = pair_dir / "src" / "sets" / fs["name"]
    assert sorted(p.name for p in files.iterdir()) == sorted([f["name"] for f in fs["files"]] + [".manifest.json"])
    # the set was dropped from the page cache when prepared: the first test reads it from the device
    assert _resident_pages(files / fs["files"][0]["name"]) == 0
    memory_copy = src.file_set(count=3, size=SIZE)  # deterministic content: the same checksums in memory
    assert memory_copy["files"] == fs["files"]
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 3, "size": SIZE}, files=fs["files"], concurrency=3, streams=streams,
                       storage="disk", timeout_seconds=60)
    check_record(rec, fs["files"], streams=streams, concurrency=3, destination="store")
    assert rec["storage"] == {"source": "disk", "destination": "disk", "direct_write": True, "fallback": None}
    # what it wrote is removed once the record is final; nothing outside its incoming/ was touched
    assert list((pair_dir / "dst" / "incoming").iterdir()) == []
    assert sorted(p.name for p in (pair_dir / "dst").iterdir()) == ["incoming", "sets"]


@pytest.mark.parametrize("storage", [{"source": "disk", "destination": "memory"},
                                     {"source": "memory", "destination": "disk"}])
def test_builtin_one_end_on_disk(disk_pair, storage):
    src, dst = disk_pair
    fs = src.file_set(count=2, size=SIZE, storage=storage["source"])
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 2, "size": SIZE}, files=fs["files"], concurrency=2, streams=2,
                       storage=storage, timeout_seconds=60)
    check_record(rec, fs["files"], streams=2, concurrency=2, destination="store")
    assert rec["storage"]["source"] == storage["source"]
    assert rec["storage"]["direct_write"] is (True if storage["destination"] == "disk" else None)


def test_disk_set_on_the_source_missing_fails_the_files_with_its_reason(disk_pair):
    src, dst = disk_pair
    src.file_set(count=1, size=SIZE)  # in memory only
    rec = dst.transfer(protocol="builtin", source={"host": src.address, "port": src.builtin_port},
                       file_set={"count": 1, "size": SIZE}, storage="disk", timeout_seconds=30)
    assert rec["status"] == "failed" and "404" in rec["error"], rec["error"]


def test_memory_backed_and_missing_disk_paths_are_refused_naming_node_and_path(agent_factory, disk_dir):
    shm = Path(tempfile.mkdtemp(prefix="tpcmesh-shm-", dir="/dev/shm"))
    try:
        on_tmpfs = agent_factory(disk_dir=shm)
        missing = agent_factory(disk_dir=disk_dir / "absent")
        for agent, path, why in ((on_tmpfs, shm, "is memory-backed (tmpfs)"), (missing, disk_dir / "absent",
                                                                            "does not exist")):
            info = agent.get("/api/v1/info").json()["disk"]
            assert info["available"] is False and why in info["message"]
            r = agent.post("/api/v1/filesets", json={"count": 1, "size": 1000, "storage": "disk"})
            assert r.status_code == 422 and r.json()["error"] == f"node {agent.name}: disk path {path} {why}" + (
                ": a disk test there would measure memory" if "memory" in why else "")
            r = agent.post("/api/v1/transfers", json={
                "test_id": "6f1c1b4e-58f2-4a4e-9d0a-2f7f0e0c1a01", "protocol": "builtin",
                "source": {"host": "127.0.0.1", "port": 1}, "file_set": {"count": 1, "size": 1000},
                "storage": {"source": "memory", "destination": "disk"}})
            assert r.status_code == 422 and agent.name in r.json()["error"] and str(path) in r.json()["error"]
        assert not (disk_dir / "absent").exists()  # a missing path is never created
        assert list(shm.iterdir()) == []
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_bad_storage_values_are_refused(disk_pair):
    src, dst = disk_pair
    base = {"test_id": "6f1c1b4e-58f2-4a4e-9d0a-2f7f0e0c1a02", "protocol": "builtin",
            "source": {"host": src.address, "port": src.builtin_port}, "file_set": {"count": 1, "size": 1000}}
    for storage, words in (("ssd", "storage must be one of memory, disk"),
                           ({"destination": "tape"}, "storage.destination must be one of memory, disk"),
                           ({"where": "disk"}, "storage must be one of")):
        r = dst.post("/api/v1/transfers", json={**base, "storage": storage})
        assert r.status_code == 422 and words in r.json()["error"], r.text
    r = dst.post("/api/v1/transfers", json={**base, "storage": "disk", "destination": "sink"})
    assert r.status_code == 422 and "needs destination 'store'" in r.json()["error"]
    r = dst.post("/api/v1/filesets", json={"count": 1, "size": 1000, "storage": "nvme"})
    assert r.status_code == 422 and "storage must be one of memory, disk" in r.json()["error"]


def test_no_space_on_a_tiny_loop_device_is_refused_with_the_figures(agent_factory, disk_dir):
    from tpcmesh_lab.diskpath import LoopDisk

    disk = LoopDisk.create(f"{os.getpid()}-nospace", 16 * 2**20, disk_dir)  # a live owner: no lab cleans it
    try:
        agent = agent_factory(disk_dir=disk.mount, disk_reserve_bytes="4MiB")
        r = agent.post("/api/v1/filesets", json={"count": 2, "size": 4_000_000, "storage": "disk"})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert "bytes are free on the filesystem" in error and "4194304 bytes must stay free (reserve)" in error
        assert "8000000 bytes plus 8000000" in error
        r = agent.post("/api/v1/transfers", json={
            "test_id": "6f1c1b4e-58f2-4a4e-9d0a-2f7f0e0c1a03", "protocol": "builtin",
            "source": {"host": "127.0.0.1", "port": 1}, "file_set": {"count": 3, "size": 4_000_000},
            "storage": "disk"})
        assert r.status_code == 422 and "12000000 bytes needed plus a reserve of 4194304 bytes" in r.json()["error"]
        assert f"node {agent.name}: disk path {disk.mount} has" in r.json()["error"]
        assert sorted(p.name for p in disk.mount.iterdir()) == ["incoming", "lost+found", "sets"]
        assert list((disk.mount / "sets").iterdir()) == []  # nothing was written
    finally:
        disk.remove()
    assert not disk.mount.exists() and not disk.image.exists()


def test_storage_ceilings_from_fio(disk_pair, pair_dir):
    src, _ = disk_pair
    r = src.post("/api/v1/storage/ceilings", json={"concurrency": 2, "size": 8 * 2**20, "runtime_seconds": 10},
                 timeout=60)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["write_bps"] > 1e6 and got["read_bps"] > 1e6
    assert (got["concurrency"], got["bytes_per_job"], got["block_bytes"], got["direct"]) == (2, 8 * 2**20, 2**20,
                                                                                             True)
    assert got["fio_version"] and got["path"] == str(pair_dir / "src")
    assert not (pair_dir / "src" / "fio").exists()  # fio's files are removed
    r = src.post("/api/v1/storage/ceilings", json={"concurrency": 0})
    assert r.status_code == 422 and "concurrency 0 is out of range (1..256)" in r.json()["error"]


def _resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (util-linux fincore)."""
    import subprocess

    out = subprocess.run(["fincore", "--json", "--bytes", str(path)], capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout)["fincore"][0]["pages"])


def test_direct_file_bypasses_the_page_cache(disk_dir):
    """The destination's writer: every aligned block goes around the page cache (fincore sees at most the
    unaligned tail's page), and the content is exact."""
    from tpcmesh_agent.directio import CHUNK, DirectFile, aligned_buffer

    path = disk_dir / "direct.dat"
    size = 2 * CHUNK + 123
    data = os.urandom(size)
    out = DirectFile(path, size)
    assert out.fallback is None
    buf = aligned_buffer(CHUNK)
    for offset in range(0, size, CHUNK):
        piece = data[offset:offset + CHUNK]
        buf[:len(piece)] = piece
        out.write_at(offset, memoryview(buf)[:len(piece)])
    out.sync()
    out.close()
    assert _resident_pages(path) <= 1
    assert path.read_bytes() == data


def test_read_ahead_sends_exactly_the_range_and_stops_with_its_sender(disk_dir):
    """The source's reader thread: an unaligned range over several blocks comes out exact and in order; a sender
    that fails (the client went away) stops the reader and is raised, leaving no thread behind."""
    import threading

    from tpcmesh_agent.directio import ALIGN, open_direct, read_range

    path = disk_dir / "src.dat"
    data = os.urandom(10 * ALIGN + 77)
    path.write_bytes(data)
    fd, fallback = open_direct(path, os.O_RDONLY)
    assert fallback is None
    try:
        def gone(piece):
            raise BrokenPipeError("client gone")

        for depth in (2, 1):  # a reader thread ahead of the sender; none (read, then send)
            got = bytearray()
            assert read_range(fd, 123, 7 * ALIGN, got.extend, depth, 2 * ALIGN) == 7 * ALIGN
            assert got == data[123:123 + 7 * ALIGN]
            got.clear()  # past the end: what there is
            assert read_range(fd, 9 * ALIGN, 5 * ALIGN, got.extend, depth, 2 * ALIGN) == ALIGN + 77
            assert got == data[9 * ALIGN:]
            before = threading.active_count()
            with pytest.raises(BrokenPipeError):
                read_range(fd, 0, len(data), gone, depth, ALIGN)
            assert threading.active_count() == before
    finally:
        os.close(fd)


def test_write_behind_lands_every_block_at_its_offset_and_reports_a_failed_write(disk_dir):
    """The destination's writer thread: blocks filled one after another land where they belong (the unaligned tail
    too); a write that fails is raised to the receiving side."""
    from tpcmesh_agent.directio import ALIGN, DirectFile, WriteBehind

    path = disk_dir / "dst.dat"
    start, data = 3 * ALIGN, os.urandom(9 * ALIGN + 5)
    out = DirectFile(path, start + len(data))
    behind = WriteBehind(out, start, depth=2, block=2 * ALIGN)
    for at in range(0, len(data), 2 * ALIGN):
        piece = data[at:at + 2 * ALIGN]
        behind.buffer()[:len(piece)] = piece
        behind.submit(len(piece))
    behind.finish()
    out.sync()
    out.close()
    assert path.read_bytes()[start:] == data

    out = DirectFile(disk_dir / "closed.dat", 4 * ALIGN)
    out.close()  # its descriptors are gone: the writer's pwrite fails
    behind = WriteBehind(out, 0, depth=2, block=ALIGN)
    behind.buffer()[:ALIGN] = data[:ALIGN]
    behind.submit(ALIGN)
    with pytest.raises(OSError):
        for _ in range(3):
            behind.buffer()
            behind.submit(ALIGN)
        behind.finish()
