"""Test-file sets on the memory-backed data directory.

A set lives in ``<data_dir>/sets/<set-name>/`` with a ``.manifest.json``. Set names: ``<count>x<size>`` (e.g.
``11x1000000000``, the 003 paper's default: 11 files of 1 GB, SI) or a named dataset of the 000/001 papers
(``small``, ``medium``, ``large``: powers of two). Content is deterministic, seeded by set and file name, so every
agent holds identical files with identical adler32 checksums. Sets are created once and verified on reuse (sizes
always; checksums when asked and on a set's first reuse after the agent started, since the files may have changed
while no agent watched them), and a set that does not fit the budget is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from .storage import drop_cache

KiB, MiB, GiB = 2**10, 2**20, 2**30
DATASETS: dict[str, tuple[int, ...]] = {
    "small": tuple(2**k for k in range(13, 23)),  # 8 KiB .. 4 MiB
    "medium": tuple(2**k for k in range(23, 31)),  # 8 MiB .. 1 GiB
    "large": tuple(2**k for k in range(31, 34)),  # 2 GiB .. 8 GiB
}
DEFAULT_COUNT, DEFAULT_SIZE = 11, 10**9
MAX_COUNT = 10_000
MAX_FILE_SIZE = 64 * 10**9
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
SET_NAME_RE = re.compile(r"^(?:[1-9][0-9]{0,4}x[1-9][0-9]{0,12}|small|medium|large)$")
CHUNK = 4 * MiB
MANIFEST = ".manifest.json"


class FileSetError(ValueError):
    """Invalid set description or a set that cannot be created; the message names the field."""


class BudgetExceeded(FileSetError):
    pass


def validate_name(name: object, what: str = "file name") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", "..") or ".." in name:
        raise FileSetError(f"{what} {name!r} is invalid: use 1-200 of [A-Za-z0-9._-], no '/' and no '..'")
    return name


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    checksum: str | None = None  # "adler32:xxxxxxxx"

    def as_dict(self) -> dict:
        return {"name": self.name, "size": self.size, "checksum": self.checksum}


@dataclass(frozen=True)
class SetSpec:
    """What a set holds, before it exists: its name and (file name, size) list."""

    name: str
    files: tuple[tuple[str, int], ...]

    @property
    def total_bytes(self) -> int:
        return sum(s for _, s in self.files)

    @property
    def file_size(self) -> int | None:
        sizes = {s for _, s in self.files}
        return sizes.pop() if len(sizes) == 1 else None


def _int_field(body: dict, key: str, lo: int, hi: int) -> int:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise FileSetError(f"file_set.{key} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise FileSetError(f"file_set.{key} {v} is out of range ({lo}..{hi})")
    return v


def size_label(size: int) -> str:
    for unit, n in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size % n == 0:
            return f"{size // n}{unit}"
    return f"{size}B"


def spec_from_request(body: dict | None) -> SetSpec:
    """{count,size} | {dataset} | {} (the default 11 x 1 GB) -> SetSpec; FileSetError names the bad field."""
    body = body or {}
    if not isinstance(body, dict):
        raise FileSetError("file_set must be an object: {count, size} or {dataset}")
    if "dataset" in body:
        extra = set(body) - {"dataset"}
        if extra:
            raise FileSetError(f"file_set: give either dataset or count+size, not {sorted(extra)} with dataset")
        ds = body["dataset"]
        if ds not in DATASETS:
            raise FileSetError(f"file_set.dataset {ds!r} is unknown (known: {', '.join(DATASETS)})")
        return SetSpec(ds, tuple((f"{ds}-{i:02d}-{size_label(s)}.dat", s) for i, s in enumerate(DATASETS[ds])))
    extra = set(body) - {"count", "size"}
    if extra:
        raise FileSetError(f"file_set: unknown keys {sorted(extra)} (use count and size, or dataset)")
    count = _int_field(body, "count", 1, MAX_COUNT) if "count" in body else DEFAULT_COUNT
    size = _int_field(body, "size", 1, MAX_FILE_SIZE) if "size" in body else DEFAULT_SIZE
    return SetSpec(f"{count}x{size}", tuple((f"file-{i:04d}.dat", size) for i in range(count)))


def spec_from_name(set_name: str) -> SetSpec:
    if not SET_NAME_RE.match(set_name):
        raise FileSetError(f"set name {set_name!r} is invalid (<count>x<size> or small, medium, large)")
    if set_name in DATASETS:
        return spec_from_request({"dataset": set_name})
    count, size = set_name.split("x")
    return spec_from_request({"count": int(count), "size": int(size)})


def _seed_block(set_name: str, file_name: str) -> bytearray:
    seed = hashlib.sha256(f"tpcmesh/{set_name}/{file_name}".encode()).digest()
    return bytearray(random.Random(seed).randbytes(CHUNK))


def write_file(path: Path, set_name: str, file_name: str, size: int) -> str:
    """Write the deterministic content; returns "adler32:xxxxxxxx" computed while writing."""
    block = _seed_block(set_name, file_name)
    adler = 1
    tmp = path.with_name(path.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done, counter = 0, 0
        view = memoryview(block)
        while done < size:
            struct.pack_into("<Q", block, 0, counter)  # per-chunk counter: no two chunks alike
            n = min(CHUNK, size - done)
            chunk = view[:n]
            adler = zlib.adler32(chunk, adler)
            off = 0
            while off < n:
                off += os.write(fd, chunk[off:])
            done += n
            counter += 1
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return f"adler32:{adler:08x}"


def adler32_of(path: Path, chunk: int = CHUNK) -> str:
    adler = 1
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            adler = zlib.adler32(view[:n], adler)
    return f"adler32:{adler:08x}"


def dir_bytes(path: Path) -> int:
    total = 0
    if path.exists():
        for p in path.rglob("*"):
            try:
                if p.is_file():
                    total += p.stat().st_size
            except FileNotFoundError:
                pass
    return total


class FileSets:
    """The agent's sets under ``sets_dir``; ``budget_bytes`` bounds sets + room for receiving one set.

    Thread-safe for different sets (one lock covers every budget check, and a set being written counts in full
    from its check on); the caller serialises requests for the same set."""

    def __init__(self, sets_dir: Path, budget_bytes: int, reserve_bytes: int = 0, cold: bool = False) -> None:
        self.sets_dir = sets_dir
        self.budget_bytes = budget_bytes
        self.reserve_bytes = reserve_bytes  # bytes the filesystem keeps free (disk mode)
        self.cold = cold  # disk mode: every ensure() ends with the files flushed and out of the page cache
        self._lock = threading.RLock()  # check_budget (under it) asks held_bytes (which takes it too)
        self._writing: dict[str, int] = {}  # set name -> its total bytes, from its budget check to its manifest
        self._verified: set[str] = set()  # sets whose checksums were checked (or written) by this process

    def path(self, set_name: str) -> Path:
        return self.sets_dir / set_name

    def manifest(self, set_name: str) -> list[FileEntry] | None:
        try:
            data = json.loads((self.path(set_name) / MANIFEST).read_text())
            return [FileEntry(f["name"], int(f["size"]), f.get("checksum")) for f in data["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _matches(self, spec: SetSpec, entries: list[FileEntry] | None, verify_checksums: bool) -> bool:
        if entries is None or [(e.name, e.size) for e in entries] != list(spec.files):
            return False
        d = self.path(spec.name)
        for e in entries:
            p = d / e.name
            try:
                if p.stat().st_size != e.size:
                    return False
            except FileNotFoundError:
                return False
            if verify_checksums and adler32_of(p) != e.checksum:
                return False
        return True

    def held_bytes(self, but: str | None = None) -> int:
        """Bytes the sets hold (a set being written: all it will hold), without set ``but``."""
        with self._lock:
            writing = dict(self._writing)
        on_disk = {p.name: dir_bytes(p) for p in self.sets_dir.iterdir() if p.is_dir()} \
            if self.sets_dir.exists() else {}
        return sum(max(on_disk.get(n, 0), writing.get(n, 0)) for n in on_disk.keys() | writing.keys() if n != but)

    def check_budget(self, spec: SetSpec) -> None:
        """Refuse before writing when the set plus room for receiving one set does not fit. Call with the lock."""
        others = self.held_bytes(but=spec.name)
        need = others + 2 * spec.total_bytes
        if need > self.budget_bytes:
            held = f"; other sets hold {others} bytes" if others else ""
            raise BudgetExceeded(
                f"file set {spec.name} needs {spec.total_bytes} bytes plus {spec.total_bytes} to receive one set"
                f"{held}: {need} bytes exceed the budget of {self.budget_bytes} bytes"
            )
        # the budget may promise more than the memory-backed filesystem holds: check what is really free
        probe = self.sets_dir
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        existing = dir_bytes(self.path(spec.name))  # a damaged copy about to be replaced
        unwritten = sum(total - dir_bytes(self.path(n)) for n, total in self._writing.items() if n != spec.name)
        free = shutil.disk_usage(probe).free + existing - max(unwritten, 0)
        if 2 * spec.total_bytes + self.reserve_bytes > free:
            reserve = f" and {self.reserve_bytes} bytes must stay free (reserve)" if self.reserve_bytes else ""
            raise BudgetExceeded(
                f"file set {spec.name} needs {spec.total_bytes} bytes plus {spec.total_bytes} to receive one set, "
                f"but only {free} bytes are free on the filesystem of {self.sets_dir}{reserve}"
            )

    def ensure(self, spec: SetSpec, verify_checksums: bool = False) -> list[FileEntry]:
        """Create the set or verify the existing one (size + manifest; checksums when asked or when this process
        has not checked them yet). Blocking."""
        entries = self.manifest(spec.name)
        verify = verify_checksums or spec.name not in self._verified
        if self._matches(spec, entries, verify):
            assert entries is not None
            self._verified.add(spec.name)
            self._cool(spec)
            return entries
        with self._lock:  # one budget check at a time, whatever the set: two sets cannot both take the last room
            self.check_budget(spec)
            self._writing[spec.name] = spec.total_bytes
        try:
            d = self.path(spec.name)
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            entries = [FileEntry(n, s, write_file(d / n, spec.name, n, s)) for n, s in spec.files]
            (d / MANIFEST).write_text(json.dumps({"name": spec.name, "files": [e.as_dict() for e in entries]}))
            self._verified.add(spec.name)
            self._cool(spec)
            return entries
        finally:
            with self._lock:
                self._writing.pop(spec.name, None)

    def _cool(self, spec: SetSpec) -> None:
        """Disk mode: the set's files on the device and out of the page cache, so the next test reads them cold."""
        if self.cold:
            drop_cache(self.path(spec.name) / n for n, _ in spec.files)

    def remove(self, set_name: str) -> bool:
        d = self.path(set_name)
        self._verified.discard(set_name)
        if d.is_dir():
            shutil.rmtree(d)
            return True
        return False

    def list(self) -> list[str]:
        if not self.sets_dir.exists():
            return []
        return sorted(p.name for p in self.sets_dir.iterdir() if (p / MANIFEST).exists())
