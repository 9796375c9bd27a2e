"""O_DIRECT reads and writes: the page cache bypassed, so a disk test measures the device, not memory.

O_DIRECT needs the buffer, the file offset and the length aligned to the device's logical block size; ALIGN (4096)
covers every common device. Buffers come from ``mmap`` (page-aligned). A file's unaligned tail (its size is rarely
a multiple of ALIGN) goes through a second, buffered descriptor and reaches the device with the fsync that ends the
file. A filesystem that refuses O_DIRECT (EINVAL at open) gets buffered I/O, and the reason is kept to report.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Callable
from pathlib import Path

ALIGN = 4096
CHUNK = 1 << 20  # a multiple of ALIGN
O_DIRECT = getattr(os, "O_DIRECT", 0)


def aligned_buffer(size: int = CHUNK) -> mmap.mmap:
    """A page-aligned buffer of ``size`` bytes (anonymous memory)."""
    return mmap.mmap(-1, size)


def open_direct(path: Path, flags: int, mode: int = 0o644) -> tuple[int, str | None]:
    """``os.open`` with O_DIRECT; (fd, None) or, where the filesystem refuses it, (buffered fd, the reason)."""
    try:
        return os.open(path, flags | O_DIRECT, mode), None
    except OSError as e:
        if e.errno != errno.EINVAL or not O_DIRECT:
            raise
        return os.open(path, flags, mode), f"the filesystem of {path.parent} refuses O_DIRECT (EINVAL)"


def read_range(fd: int, offset: int, count: int, send: Callable[[memoryview], None],
               buf: mmap.mmap | None = None) -> int:
    """Read [offset, offset+count) of an O_DIRECT ``fd`` in aligned chunks and hand each piece to ``send``.
    Returns the bytes sent (fewer when the file is shorter)."""
    buf = buf if buf is not None else aligned_buffer()
    view = memoryview(buf)
    pos = offset - offset % ALIGN
    skip, sent = offset - pos, 0
    try:
        while sent < count:
            n = os.preadv(fd, [view], pos)
            if n <= skip:
                break
            piece = view[skip:min(n, skip + count - sent)]
            send(piece)
            sent += len(piece)
            pos += n
            skip = 0
            if n < len(view):  # end of file
                break
    finally:
        view.release()
    return sent


class DirectFile:
    """A destination file written with O_DIRECT where the filesystem allows it (``fallback`` says why not)."""

    def __init__(self, path: Path, size: int | None) -> None:
        self.path = path
        self.fd, self.fallback = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.tail_fd = os.open(path, os.O_WRONLY)  # the unaligned tail, buffered
        if size:
            try:
                os.posix_fallocate(self.fd, 0, size)
            except OSError:
                os.ftruncate(self.fd, size)

    def write_at(self, offset: int, data: memoryview) -> None:
        """Write ``data`` (from an aligned buffer) at ``offset``: the aligned part direct, the rest buffered."""
        direct = len(data) - len(data) % ALIGN if offset % ALIGN == 0 else 0
        done = 0
        while done < direct:
            done += os.pwrite(self.fd, data[done:direct], offset + done)
        while done < len(data):
            done += os.pwrite(self.tail_fd, data[done:], offset + done)

    def sync(self) -> None:
        """The bytes on the device (the tail from the page cache too)."""
        os.fsync(self.tail_fd)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.tail_fd)
