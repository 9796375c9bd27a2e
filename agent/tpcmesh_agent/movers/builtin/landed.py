"""adler32 checksums of the files the built-in endpoint received (/incoming), for ``Want-Digest`` (RFC 3230).

A COPY records the checksum once when its file has landed: the one it verified, or one computed right after the
last byte (from the page cache, while the client reads the final marker line); the zero-copy pull (splice from the
socket into the file) never brings the bytes into the process, and several streams land them out of order, so
they cannot be summed on the way in. A ``Want-Digest`` for a file received otherwise (before a restart, or by
XRootD) computes it then, once. An entry holds while the file's size and mtime are unchanged.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ...files import adler32_of

MAX_ENTRIES = 4096  # beyond this, entries of files that are gone are dropped


class LandedChecksums:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Path, tuple[int, int, str]] = {}
        self._busy: dict[Path, threading.Lock] = {}  # one computation per file; a second asker waits for it

    @staticmethod
    def _identity(path: Path) -> tuple[int, int]:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns

    def record(self, path: Path, checksum: str) -> None:
        """``checksum`` ("adler32:xxxxxxxx") of ``path`` as it is now."""
        size, mtime = self._identity(path)
        with self._lock:
            self._entries[path] = (size, mtime, checksum)
            if len(self._entries) > MAX_ENTRIES:
                for gone in [p for p in self._entries if not p.exists()]:
                    del self._entries[gone]

    def forget(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)

    def checksum(self, path: Path) -> str:
        """The checksum of ``path``, computed only when none is recorded for its current size and mtime."""
        with self._lock:
            busy = self._busy.setdefault(path, threading.Lock())
        with busy:
            size, mtime = self._identity(path)
            with self._lock:
                entry = self._entries.get(path)
            if entry is not None and entry[:2] == (size, mtime):
                return entry[2]
            value = adler32_of(path)
            with self._lock:
                self._entries[path] = (size, mtime, value)
                self._busy.pop(path, None)
            return value
