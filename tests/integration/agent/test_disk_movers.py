"""Disk mode for XRootD (HTTP-TPC, root://) and GridFTP: two real agents whose disk paths are on the machine's real
disk, their real servers reading the source's disk copy and writing the destination's through the data dir's disk/
links. Every file lands on the disk path (seen there while the test runs, never in the memory-backed incoming/)
with the right checksum; the record names the fsync fallback; memory mode is unchanged beside it. The fsync itself
is proved on the real kernel by the page cache's dirty-page count (cachestat)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.agent.test_disk_mode import pair_dir  # noqa: F401 (a module-scoped fixture)
from tests.integration.agent.test_protocols import ALL, check_tpc_record, xrootd_ports

pytestmark = pytest.mark.integration

COUNT, SIZE = 3, 3_000_017
PORTS = {"xrootd-https": "xrootd_https_port", "xrootd-root": "xrootd_root_port", "gridftp": "gridftp_port"}
SERVER = {"xrootd-https": "XRootD", "xrootd-root": "XRootD", "gridftp": "globus-gridftp-server"}


@pytest.fixture(scope="module")
def disk_servers(module_agent_factory, pair_dir):  # noqa: F811
    """A source and a destination running every protocol as the unprivileged run user, disk paths pair_dir/src
    and pair_dir/dst (made 0700 as mkdtemp makes them: the agent lets its servers' user in); the destination is a
    mesh member (the source's GridFTP admits it)."""
    agents = []
    pair_dir.chmod(0o755)  # mkdtemp's 0700 would keep the servers' user out (the agent changes only the disk path)
    for end in ("src", "dst"):
        (pair_dir / end).mkdir(mode=0o700)
        agents.append(module_agent_factory(protocols=ALL, run_user="nobody", disk_dir=pair_dir / end,
                                           disk_reserve_bytes="1M", **xrootd_ports()))
    src, dst = agents
    disk = src.file_set(count=COUNT, size=SIZE, storage="disk", mesh=[dst.name])["files"]
    memory = src.file_set(count=COUNT, size=SIZE)["files"]
    assert disk == memory  # seeded content: the same files and checksums on both storages
    return src, dst, disk


class Landing:
    """Watches a test's landing directories while it runs: the names seen on the disk path, and whether the
    memory-backed incoming/ got the test's directory."""

    def __init__(self, dst, test_id: str) -> None:
        self.disk = Path(dst.settings["disk_dir"]) / "incoming" / test_id
        self.memory = dst.data_dir / "data" / "incoming" / test_id
        self.seen: set[str] = set()
        self.in_memory = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.seen.update(p.name for p in self.disk.glob("*"))
            self.in_memory = self.in_memory or self.memory.exists()
            time.sleep(0.005)

    def __enter__(self) -> Landing:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("streams", [1, 8])
@pytest.mark.parametrize("protocol", list(PORTS))
def test_disk_to_disk_lands_checksummed_files_on_the_disk_path(disk_servers, protocol, streams):
    src, dst, files = disk_servers
    src.file_set(count=COUNT, size=SIZE, storage="disk")  # cold again, as the operator prepares each test
    test_id = str(uuid.uuid4())
    with Landing(dst, test_id) as landing:
        rec = dst.transfer(test_id=test_id, protocol=protocol, source={"host": src.address,
                                                                       "port": src.ports[PORTS[protocol]]},
                           file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=streams,
                           storage="disk", timeout_seconds=60, timeout=90)
    check_tpc_record(rec, files, protocol, streams, COUNT, SIZE)
    assert rec["storage"] == {"source": "disk", "destination": "disk", "direct_write": False,
                              "fallback": f"{SERVER[protocol]} writes through the page cache; the agent fsyncs each "
                                          "received file before its end time"}
    assert landing.seen == {f["name"] for f in files} and not landing.in_memory
    assert list((Path(dst.settings["disk_dir"]) / "incoming").iterdir()) == []  # removed once the record is final


@pytest.mark.parametrize("protocol", list(PORTS))
def test_memory_mode_is_unchanged_beside_disk_mode(disk_servers, protocol):
    src, dst, files = disk_servers
    test_id = str(uuid.uuid4())
    with Landing(dst, test_id) as landing:
        rec = dst.transfer(test_id=test_id, protocol=protocol, source={"host": src.address,
                                                                       "port": src.ports[PORTS[protocol]]},
                           file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=2,
                           timeout_seconds=60, timeout=90)
    check_tpc_record(rec, files, protocol, 2, COUNT, SIZE)
    assert "storage" not in rec and landing.in_memory and not landing.seen


def test_one_end_on_disk_reads_or_writes_the_disk_path(disk_servers):
    src, dst, files = disk_servers
    for storage in ({"source": "disk", "destination": "memory"}, {"source": "memory", "destination": "disk"}):
        test_id = str(uuid.uuid4())
        with Landing(dst, test_id) as landing:
            rec = dst.transfer(test_id=test_id, protocol="xrootd-root", source={"host": src.address,
                                                                                "port": src.ports["xrootd_root_port"]},
                               file_set={"count": COUNT, "size": SIZE}, files=files, concurrency=COUNT, streams=1,
                               storage=storage, timeout_seconds=60, timeout=90)
        check_tpc_record(rec, files, "xrootd-root", 1, COUNT, SIZE)
        assert rec["storage"]["source"] == storage["source"]
        assert (rec["storage"]["direct_write"] is None) is (storage["destination"] == "memory")
        assert landing.in_memory is (storage["destination"] == "memory")


def test_a_disk_set_missing_on_the_source_fails_with_the_servers_reason(disk_servers):
    src, dst, _ = disk_servers
    files = src.file_set(count=1, size=1000)["files"]  # in memory only
    rec = dst.transfer(protocol="gridftp", source={"host": src.address, "port": src.ports["gridftp_port"]},
                       file_set={"count": 1, "size": 1000}, files=files, storage="disk", timeout_seconds=30)
    assert rec["status"] == "failed" and "No such file" in rec["error"], rec["error"]


def test_disk_mode_refusals_name_what_cannot_be_done(disk_servers, pair_dir):  # noqa: F811
    src, dst, _ = disk_servers
    base = {"source": {"host": src.address, "port": src.ports["iperf3_port"]}, "file_set": {"count": 1, "size": 1}}
    r = dst.post("/api/v1/transfers", json={**base, "test_id": str(uuid.uuid4()), "protocol": "iperf3",
                                            "storage": "disk"})
    assert r.status_code == 422 and "storage disk is not built for iperf3 (it moves no file" in r.json()["error"]
    # the servers' user (nobody) shut out of the disk path by a directory above it: named before anything runs
    pair_dir.chmod(0o700)
    try:
        r = dst.post("/api/v1/transfers", json={**base, "test_id": str(uuid.uuid4()), "protocol": "gridftp",
                                                "storage": {"destination": "disk"}})
    finally:
        pair_dir.chmod(0o755)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(f"node {dst.name}: disk path {pair_dir / 'dst'}: the protocol servers' user "
                                        f"(uid 65534) cannot enter {pair_dir} (mode 0700")


def _dirty_pages(path: Path) -> int:
    """Dirty pages of ``path`` in the page cache (cachestat, Linux 6.5)."""
    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        rng, st = Range(0, 0), Stat()
        if libc.syscall(451, fd, ctypes.byref(rng), ctypes.byref(st), 0) != 0:  # x86_64 / aarch64 number
            pytest.skip(f"cachestat: {os.strerror(ctypes.get_errno())}")
        return int(st.dirty + st.writeback)
    finally:
        os.close(fd)


def test_a_landed_file_is_on_the_device_when_synced_returns(pair_dir):  # noqa: F811
    """What land_on_disk waits for: a file written through the page cache (as XRootD and GridFTP write) has dirty
    pages; once FileWatch.synced() returns it has none, and the time it gives is not before the file was
    complete."""
    from tpcmesh_agent.movers.base import Progress
    from tpcmesh_agent.movers.external import FileWatch

    path = pair_dir / "landed.dat"
    size = 8 * 2**20

    async def land() -> tuple:
        with FileWatch(path, size, Progress(), sync=True) as watch:
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            dirty = _dirty_pages(path)
            await asyncio.sleep(0.1)  # the watch sees the file complete and starts its early fsync
        return dirty, await watch.synced(), watch.complete

    dirty_before, synced, complete = asyncio.run(land())
    assert dirty_before > 0
    assert _dirty_pages(path) == 0
    assert synced >= complete
    path.unlink()
