"""Lab disks against the real kernel (issue #28): each node's disk path is a loop device over a file on the real
disk, formatted and mounted; one is throttled (cgroup io.max, or blkio where the io controller is on cgroup v1).
The throttled disk's fio ceiling matches the throttle within 10 %, it slows the built-in mover's disk->disk pull
into it to about that rate, and memory->memory on the same pair is unaffected. Loop devices, mounts and cgroups
are gone when the lab closes."""

from __future__ import annotations

import os
import secrets
import ssl
import time
import uuid

import httpx
import pytest
from tpcmesh_lab import diskpath
from tpcmesh_lab.mesh import Certificates, start_agents
from tpcmesh_lab.netns import Lab, netns_unavailable_reason
from tpcmesh_lab.profile import ProfileError, parse_profile
from tpcmesh_operator.run.agents import DEFAULT_PORTS

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
    pytest.mark.skipif(diskpath.io_hierarchy() is None, reason="no cgroup io (v2) or blkio (v1) controller"),
]

WRITE_MBPS = 20
FILES = {"count": 2, "size": 24_000_000}  # 48 MB: 2.4 s at the throttle


def _wait(client: httpx.Client, base: str, tid: str) -> dict:
    deadline = time.monotonic() + 60
    while (rec := client.get(f"{base}/{tid}").json())["status"] == "running":
        assert time.monotonic() < deadline, rec
        time.sleep(0.1)
    return rec


def test_a_throttled_lab_disk_caps_disk_to_disk_and_its_fio_ceiling_matches(tmp_path):
    profile = parse_profile({"nodes": ["src", "slow"], "defaultLink": {"delayMs": 0.1}, "hosts": [
        {"node": "src", "diskBytes": 128 * 2**20},
        {"node": "slow", "diskBytes": 320 * 2**20, "diskFilesystem": "xfs", "diskWriteMBps": WRITE_MBPS}]}, "disk")
    tmp_path.chmod(0o755)
    with Lab(profile, mode="netns") as lab:
        src, slow = lab.node("src"), lab.node("slow")
        assert src.disk is not None and slow.disk is not None and slow.io_group is not None
        assert os.path.ismount(slow.disk.mount) and src.io_group is None
        disks = [(src.disk.device, src.disk.mount, src.disk.image), (slow.disk.device, slow.disk.mount,
                                                                      slow.disk.image)]
        certs = Certificates.create(tmp_path / "pki", lab.nodes)
        token = secrets.token_urlsafe(32)
        start_agents(lab, certs, token, tmp_path, budget_bytes=10**9, protocols=("builtin",), wait=120)
        ctx = ssl.create_default_context(cafile=str(certs.ca_file))
        control = DEFAULT_PORTS["control"]
        url = {n.name: f"https://{n.address}:{control}/api/v1" for n in (src, slow)}
        with httpx.Client(verify=ctx, timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
            ceilings = {}
            for name in url:
                r = client.post(f"{url[name]}/storage/ceilings", json={"concurrency": 1, "size": 24 * 2**20,
                                                                        "runtime_seconds": 20})
                assert r.status_code == 200, r.text
                ceilings[name] = r.json()
            for storage in ("memory", "disk"):
                client.post(f"{url['src']}/filesets", json={**FILES, "storage": storage}).raise_for_status()
            rates = {}
            for storage in ("memory", "disk"):
                tid = str(uuid.uuid4())
                client.post(f"{url['slow']}/transfers", json={
                    "test_id": tid, "protocol": "builtin", "streams": 1, "concurrency": 1, "file_set": FILES,
                    "source": {"host": src.address, "port": DEFAULT_PORTS["builtin"]}, "storage": storage,
                    "timeout_seconds": 50}).raise_for_status()
                rec = _wait(client, f"{url['slow']}/transfers", tid)
                assert rec["status"] == "succeeded" and rec["checksum"] == "ok", rec["error"]
                rates[storage] = rec["total_bytes"] / rec["wall_seconds"]
    throttle = WRITE_MBPS * 1e6
    print(f"fio write ceilings: src {ceilings['src']['write_bps'] / 1e6:.1f} MB/s, slow "
          f"{ceilings['slow']['write_bps'] / 1e6:.1f} MB/s (throttle {WRITE_MBPS} MB/s); builtin into slow: "
          f"memory->memory {rates['memory'] / 1e6:.1f} MB/s, disk->disk {rates['disk'] / 1e6:.1f} MB/s")
    assert abs(ceilings["slow"]["write_bps"] - throttle) <= 0.1 * throttle, ceilings["slow"]
    assert ceilings["src"]["write_bps"] > 2 * throttle, ceilings["src"]  # the unthrottled disk
    assert 0.7 * throttle <= rates["disk"] <= 1.1 * throttle, rates
    assert rates["memory"] > 3 * throttle, rates
    for device, mount, image in disks:  # the lab's disks are gone with it
        assert not os.path.ismount(mount) and not mount.exists() and not image.exists()
        assert device not in [d for d, _ in diskpath.leftovers()]


def test_disk_settings_in_a_profile_are_checked():
    with pytest.raises(ProfileError, match=r"hosts\[0\]\.diskWriteMBps: needs diskBytes"):
        parse_profile({"nodes": ["a"], "hosts": [{"node": "a", "diskWriteMBps": 10}]}, "p")
    with pytest.raises(ProfileError, match=r"diskFilesystem: 'btrfs' is not one of ext4, xfs"):
        parse_profile({"nodes": ["a"], "hosts": [{"node": "a", "diskBytes": 2**24, "diskFilesystem": "btrfs"}]}, "p")
    with pytest.raises(ProfileError, match=r"diskBytes: xfs needs at least 300000000 bytes"):
        parse_profile({"nodes": ["a"], "hosts": [{"node": "a", "diskBytes": 2**24, "diskFilesystem": "xfs"}]}, "p")


def test_a_killed_runs_loop_disk_is_cleaned_up():
    """What `make local-cleanup` does for disks (netns.remove_leftovers passes its owner test): a lab disk whose
    owner is gone is unmounted, detached and deleted; another owner's is left alone."""
    dead = diskpath.LoopDisk.create("999999999-gone", 16 * 2**20, diskpath.DISK_DIR)
    live = diskpath.LoopDisk.create(f"{os.getpid()}-live", 16 * 2**20, diskpath.DISK_DIR)
    try:
        assert {dead.device, live.device} <= {d for d, _ in diskpath.leftovers()}
        removed = diskpath.clean_leftovers(lambda rest: rest.split("-")[0] == "999999999")
        assert removed == [dead.device]
        assert not dead.mount.exists() and not dead.image.exists()
        assert os.path.ismount(live.mount)
    finally:
        dead.remove()
        live.remove()
