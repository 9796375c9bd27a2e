"""Disk mode (#28) as the dashboard reads it: a storage setting's two ends, and the node ceilings that bound them.

A setting (models.STORAGE_SETTINGS) names where the source read the files and where the destination wrote them.
A node's disk ceilings (Node.disk_read_gbps, disk_write_gbps: fio, sequential 1 MiB O_DIRECT at the benchmark's
concurrency) bound the disk ends, as its loopback ceiling bounds a memory-to-memory transfer; the grid draws them on
its diagonal and the limit model (diagnosis.limits) reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MEMORY, DISK = "memory", "disk"
# Where a test's files were read from and written to (the contract's storage, source→destination): a grid setting of
# its own, like the address family. "memory" is memory to memory (the papers' method, and every record without
# storage); "disk" is disk to disk; the mixed ones name the source's end first.
STORAGE_SETTINGS = [MEMORY, DISK, f"{DISK}-to-{MEMORY}", f"{MEMORY}-to-{DISK}"]


def ends(setting: str) -> tuple[str, str]:
    """(source's end, destination's end) of a storage setting: "disk-to-memory" -> ("disk", "memory")."""
    if setting not in STORAGE_SETTINGS:
        raise ValueError(f"storage must be one of {', '.join(STORAGE_SETTINGS)}, not {setting!r}")
    src, _, dst = setting.partition("-to-")
    return src, dst or src


def setting(source: str, destination: str) -> str:
    """The setting of two ends (ends' inverse)."""
    return source if source == destination else f"{source}-to-{destination}"


def setting_of(record: Mapping[str, Any] | None) -> str:
    """A record's setting from the contract's storage {source, destination}; none: memory to memory."""
    return setting((record or {}).get("source", MEMORY), (record or {}).get("destination", MEMORY))


def tax(rates: Mapping[str, float | None]) -> dict[str, Any] | None:
    """What each end's storage costs a pair (the pair page's "storage tax"), from one setting's rate (Gbit/s) per
    storage setting: each end's tax is 1 − (its disk alone ÷ memory to memory), and disk to disk's is both ends'
    at once. None without the memory-to-memory rate or any disk rate beside it."""
    memory = rates.get(MEMORY)
    disk = {s: rates.get(s) for s in STORAGE_SETTINGS[1:] if rates.get(s) is not None}
    if not memory or not disk:
        return None

    def cost(s: str) -> float | None:
        return None if s not in disk else round(1 - disk[s] / memory, 3)

    return {"memory_gbps": memory, **{f"{s.replace('-', '_')}_gbps": rates.get(s) for s in STORAGE_SETTINGS[1:]},
            "source_tax": cost(setting(DISK, MEMORY)), "destination_tax": cost(setting(MEMORY, DISK)),
            "both_tax": cost(DISK)}


def diagonal(node: Mapping[str, Any], storage: str) -> dict[str, float]:
    """The ceilings a node's diagonal cell shows under a storage setting, by name: its loopback in memory mode;
    the disk read ceiling where it is a disk source, the write ceiling where it is a disk destination. Only the
    measured ones: empty when none was."""
    src, dst = ends(storage)
    figures = {"loopback": node.get("loopback_gbps")} if (src, dst) == (MEMORY, MEMORY) else {
        **({"disk read": node.get("disk_read_gbps")} if src == DISK else {}),
        **({"disk write": node.get("disk_write_gbps")} if dst == DISK else {}),
    }
    return {k: v for k, v in figures.items() if v is not None}
