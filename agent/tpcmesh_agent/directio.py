"""O_DIRECT reads and writes: the page cache bypassed, so a disk test measures the device, not memory.

O_DIRECT needs the buffer, the file offset and the length aligned to the device's logical block size; ALIGN (4096)
covers every common device. Buffers come from ``mmap`` (page-aligned). A file's unaligned tail (its size is rarely
a multiple of ALIGN) goes through a second, buffered descriptor and reaches the device with the fsync that ends the
file. A filesystem that refuses O_DIRECT (EINVAL at open) gets buffered I/O, and the reason is kept to report.

Without the page cache nothing reads ahead or writes behind for us, and one thread that alternates between the
device and the socket leaves the device idle while it sends (the source used to read 1 MiB, send it, then read
the next). So each connection's device I/O runs in a thread of its own, BLOCK bytes per request,
DEPTH buffers ahead of (or behind) the socket: ``read_range`` reads ahead of the sender, ``WriteBehind`` writes
behind the receiver.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

ALIGN = 4096
CHUNK = 1 << 20  # a multiple of ALIGN
BLOCK = 2 << 20  # bytes per device request (4 MiB measured no faster disk->disk, and doubles the memory)
DEPTH = 3  # buffers per connection: one at the device, one at the socket, one ready (6 MiB of memory)
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


class _Ring:
    """DEPTH aligned buffers passed between two threads: the producer fills a free one and hands it on as ``(index,
    start, end, at)``; the consumer uses view[start:end] and gives it back. None on ``full`` ends the stream. An
    exception on either side is kept in ``failed`` and stops the other at its next buffer (never a stuck thread)."""

    def __init__(self, depth: int, size: int) -> None:
        self.bufs = [aligned_buffer(size) for _ in range(depth)]
        self.views = [memoryview(b) for b in self.bufs]
        self.free: queue.Queue[int | None] = queue.Queue()
        self.full: queue.Queue[tuple[int, int, int, int] | None] = queue.Queue()
        for i in range(depth):
            self.free.put(i)
        self.failed: list[BaseException] = []

    def close(self) -> None:
        for v, b in zip(self.views, self.bufs, strict=True):
            v.release()
            with contextlib.suppress(BufferError):  # a slice still held (an exception's traceback): unmapped with it
                b.close()


class _RangeReads:
    """The aligned reads that cover [offset, offset+count) of an O_DIRECT ``fd``: each ``into(view)`` fills a
    buffer from the next aligned position and says which part of it belongs to the range, None once the range
    (or the file) has ended."""

    def __init__(self, fd: int, offset: int, count: int) -> None:
        self.fd, self.left = fd, count
        self.pos = offset - offset % ALIGN
        self.skip = offset - self.pos
        self.ended = count <= 0

    def into(self, view: memoryview) -> tuple[int, int] | None:
        if self.ended:
            return None
        n = os.preadv(self.fd, [view], self.pos)
        if n <= self.skip:
            self.ended = True
            return None
        start, end = self.skip, min(n, self.skip + self.left)
        self.left -= end - start
        self.pos += n
        self.skip = 0
        self.ended = self.left <= 0 or n < len(view)  # the range done, or the end of the file
        return start, end


def read_range(fd: int, offset: int, count: int, send: Callable[[memoryview], None], depth: int = DEPTH,
               block: int = BLOCK) -> int:
    """Read [offset, offset+count) of an O_DIRECT ``fd`` in aligned ``block``s, a reader thread up to ``depth``
    blocks ahead, and hand each piece to ``send`` (in the calling thread). Returns the bytes sent (fewer when the
    file is shorter). A ``send`` that raises stops the reader; a failed read is raised here. ``depth`` 1: no
    reader thread, each block read and then sent."""
    reads = _RangeReads(fd, offset, count)
    if depth <= 1:
        return _read_inline(reads, send, block)
    ring = _Ring(depth, block)
    stop = threading.Event()

    def reader() -> None:
        try:
            while (i := ring.free.get()) is not None and not stop.is_set():
                span = reads.into(ring.views[i])
                if span is None:
                    break
                ring.full.put((i, *span, 0))
        except BaseException as e:  # raised to the sender
            ring.failed.append(e)
        finally:
            ring.full.put(None)

    thread = threading.Thread(target=reader, name="direct-reader", daemon=True)
    thread.start()
    sent = 0
    try:
        while (item := ring.full.get()) is not None:
            i, a, b, _ = item
            sent += _send(ring.views[i][a:b], send)
            ring.free.put(i)
    finally:
        stop.set()
        ring.free.put(None)  # a reader waiting for a buffer wakes and stops
        thread.join()
        ring.close()
    if ring.failed:
        raise ring.failed[0]
    return sent


def _send(piece: memoryview, send: Callable[[memoryview], None]) -> int:
    """``send(piece)``, the view released after (the ring's buffer is reused); its length."""
    n = len(piece)
    try:
        send(piece)
    finally:
        piece.release()
    return n


def _read_inline(reads: _RangeReads, send: Callable[[memoryview], None], block: int) -> int:
    buf = aligned_buffer(block)
    view = memoryview(buf)
    sent = 0
    try:
        while (span := reads.into(view)) is not None:
            sent += _send(view[span[0]:span[1]], send)
    finally:
        view.release()
        with contextlib.suppress(BufferError):
            buf.close()
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


class WriteBehind:
    """Writes into a DirectFile from ``offset`` on, in a writer thread up to ``depth`` buffers behind the caller:
    ``buffer()`` is the next free aligned buffer of ``block`` bytes to fill, ``submit(n)`` queues its first ``n``
    bytes at the next offset (full blocks keep the writes aligned), ``finish()`` waits for the last write. A failed
    write is raised at the caller's next ``buffer()`` or ``finish()``."""

    def __init__(self, out: DirectFile, offset: int, depth: int = DEPTH, block: int = BLOCK) -> None:
        self.out, self.pos, self.block = out, offset, block
        self._ring = _Ring(depth, block)
        self._current: int | None = None
        self._thread = threading.Thread(target=self._write, name="direct-writer", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        ring = self._ring
        while (item := ring.full.get()) is not None:
            i, a, b, at = item
            try:
                if not ring.failed:
                    self.out.write_at(at, ring.views[i][a:b])
            except BaseException as e:  # raised to the caller at its next buffer
                ring.failed.append(e)
            ring.free.put(i)

    def buffer(self) -> memoryview:
        if self._current is None:
            i = self._ring.free.get()
            assert i is not None  # only read_range's stop puts None
            if self._ring.failed:
                self._ring.free.put(i)
                raise self._ring.failed[0]
            self._current = i
        return self._ring.views[self._current]

    def submit(self, n: int) -> None:
        assert self._current is not None, "submit() without buffer()"
        if n:
            self._ring.full.put((self._current, 0, n, self.pos))
            self.pos += n
        else:
            self._ring.free.put(self._current)
        self._current = None

    def finish(self) -> None:
        """Every queued write done (or failed: raised); the buffers freed. Call once, also after an error."""
        if self._current is not None:
            self._ring.free.put(self._current)
            self._current = None
        self._ring.full.put(None)
        self._thread.join()
        self._ring.close()
        if self._ring.failed:
            raise self._ring.failed[0]
