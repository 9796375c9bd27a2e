#!/usr/bin/env python3
"""Hammer one test "external" XRootD (tests/support/external_xrootd.py: davs, TLS, SciTokens, HTTP-TPC, adler32)
with many concurrent HTTPS requests on loopback, to find which request path crashes XRootD 5.5.3 (a segfault in
libssl seen once in a full test run: SSL_write called on a NULL SSL). Run as root from the repository:

    .venv/bin/python hack/xrootd_tls_stress.py [--seconds 120] [--workers 24] [--timeout 1] [--pause 0.3] \
        [--kinds ck,ckabort,...] [--extra 'directive ...']

Request kinds (--kinds): ``ck`` a HEAD with Want-Digest: adler32 (the checksum is computed asynchronously, a
"Bridge waiting" in the log); ``ckabort`` a HEAD or GET with Want-Digest with the connection closed (or reset) at
once or soon after; ``getabort`` a GET dropped mid-body; ``put`` a PUT rewriting a file (its checksum must be
computed again); ``hsabort`` a TLS handshake dropped half-way or right after; ``copy`` an HTTP-TPC COPY the endpoint
pulls from itself, read to its last line; ``copyabort`` the same COPY with the client gone at once or soon after.
``--pause`` stops the server (SIGSTOP/SIGCONT) at random so that requests and disconnects pile up and are handled
together, as on a loaded host; ``--extra`` appends configuration lines (to try a directive). Prints the request
counts, a tally of the server log's disconnect reasons and waits, and whether the server survived (exit status 1
when it died; with core dumps enabled its core is in the kernel's core_pattern).

Seen on Debian 12 (xrootd 5.5.3, OpenSSL 3.0.19), 2 cores under load: ``--seconds 40 --workers 32 --timeout 1
--pause 0.3 --kinds hsabort,ckabort,getabort --files 4 --size 1048576`` killed the server in 2 of 4 runs, each time
a NULL dereference in libssl called from XrdHttpProtocol::Process (SSL_get_error on a NULL SSL; inside SSL_accept),
the same family as the suite's ``segfault at 30 … libssl.so.3[355bc…]`` (SSL_write on a NULL SSL). Aborted TLS
handshakes alone (``--kinds hsabort``, same settings) killed it in 3 of 3 runs (BIO_test_flags on a NULL BIO inside
SSL_accept), ``ckabort,getabort`` in 0 of 3, and ``--extra 'http.tlsreuse off'`` did not help (2 of 4). The all-kinds
mix with COPYs also logged "XrdLink: attempt to reuse active link" thousands of times (new connections dropped):
XRootD issue 1928, a stale epoll event dispatched to a recycled link, fixed in 5.5.4 (PR 1941).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import external_xrootd as ext  # noqa: E402
from tests.support.agents import TestPKI  # noqa: E402

KINDS = ("ck", "ckabort", "getabort", "put", "hsabort", "copy", "copyabort")


def agents_pki(directory: Path) -> TestPKI:
    from tpcmesh_operator.credentials import pki

    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    ca = pki.create_ca("stress agents CA")
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    return TestPKI(ca_file=directory / "ca.crt", ca_dir=pki.write_ca_dir(ca.cert_pem, directory / "ca-dir"), ca=ca,
                   directory=directory)


class Hammer:
    def __init__(self, x: ext.ExternalXrootd, token: str, nfiles: int, size: int, kinds: list[str]) -> None:
        self.x, self.token, self.nfiles, self.size, self.kinds = x, token, nfiles, size, kinds
        self.ctx = ssl.create_default_context(cafile=str(x.site_pki.ca_file))
        self.counts: dict[str, int] = {k: 0 for k in kinds}
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.timeout = 30.0

    def _tls(self) -> ssl.SSLSocket:
        raw = socket.create_connection((self.x.address, self.x.port), timeout=self.timeout)
        return self.ctx.wrap_socket(raw, server_hostname=self.x.address)

    def _request(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.x.address}:{self.x.port}",
                 f"Authorization: Bearer {self.token}", *(f"{k}: {v}" for k, v in headers.items())]
        if body or method == "PUT":
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    @staticmethod
    def _close(s: socket.socket, reset: bool) -> None:
        if reset:  # RST instead of FIN
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    @staticmethod
    def _read_all(s: ssl.SSLSocket) -> bytes:
        """The answer's status line and headers (and whatever came with them)."""
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got

    def one(self, kind: str) -> None:
        f = f"/store/stress/f{random.randrange(self.nfiles)}"
        if kind == "ck":
            with self._tls() as s:
                s.sendall(self._request("HEAD", f, {"Want-Digest": "adler32", "Connection": "close"}))
                self._read_all(s)
        elif kind == "ckabort":
            s = self._tls()
            s.sendall(self._request(random.choice(("HEAD", "GET")), f, {"Want-Digest": "adler32"}))
            time.sleep(random.choice((0, 0, 0.001, 0.005, 0.02, 0.1)))
            self._close(s, random.random() < 0.5)
        elif kind == "getabort":
            s = self._tls()
            s.sendall(self._request("GET", f, {}))
            s.recv(random.choice((1, 4096, 65536)))
            self._close(s, random.random() < 0.5)
        elif kind == "put":
            with self._tls() as s:
                s.sendall(self._request("PUT", f, {"Connection": "close"}, os.urandom(16) * (self.size // 16)))
                self._read_all(s)
        elif kind in ("copy", "copyabort"):  # the endpoint pulls one of its own files (HTTP-TPC, its TPC handler)
            src = f"https://{self.x.address}:{self.x.port}/store/stress/f{random.randrange(self.nfiles)}"
            s = self._tls()
            s.sendall(self._request("COPY", f"/store/stress/c{random.randrange(self.nfiles)}", {
                "Source": src, "Credential": "none", "TransferHeaderAuthorization": f"Bearer {self.token}",
                "Connection": "close"}))
            if kind == "copy":  # the body ends with a "success: ..." or "failure: ..." line (no closing chunk)
                got = b""
                while b"success" not in got and b"failure" not in got:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                s.close()
            else:
                time.sleep(random.choice((0, 0.001, 0.01, 0.05, 0.2)))
                self._close(s, random.random() < 0.5)
        elif kind == "hsabort":
            raw = socket.create_connection((self.x.address, self.x.port), timeout=self.timeout)
            if random.random() < 0.5:
                raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(random.randrange(0, 200)))
            else:  # a full handshake, then gone
                s = self.ctx.wrap_socket(raw, server_hostname=self.x.address)
                self._close(s, random.random() < 0.5)
                return
            self._close(raw, random.random() < 0.5)

    def worker(self) -> None:
        while not self.stop.is_set():
            kind = random.choice(self.kinds)
            try:
                self.one(kind)
                with self.lock:
                    self.counts[kind] += 1
            except (OSError, ssl.SSLError) as e:
                with self.lock:
                    key = f"{kind}:{type(e).__name__}"
                    self.errors[key] = self.errors.get(key, 0) + 1
                if isinstance(e, ConnectionRefusedError):
                    self.stop.set()


def running(pid: int | None) -> bool:
    """Whether the process is there and not a zombie."""
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--workers", type=int, default=24)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--size", type=int, default=8 << 20, help="bytes per file (each checksum reads it whole)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--timeout", type=float, default=30, help="client socket timeout (short: clients give up)")
    ap.add_argument("--pause", type=float, default=0,
                    help="stop the server (SIGSTOP) for up to this many seconds at random, about every second, "
                         "so requests and client disconnects pile up and are handled at once (as on a loaded host)")
    ap.add_argument("--extra", action="append", default=[], help="a configuration line to append (repeatable)")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    base_config = ext._config

    def config(*args, **kw) -> str:  # the endpoint's own configuration plus --extra
        return base_config(*args, **kw) + "".join(f"{line}\n" for line in a.extra)

    ext._config = config
    work = Path(tempfile.mkdtemp(prefix="xrootd-stress-", dir="/dev/shm"))
    try:
        return stress(a, kinds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stress(a: argparse.Namespace, kinds: list[str], work: Path) -> int:
    with ext.external_xrootd(agents_pki(work / "agents")) as x:
        pid = None
        for p in Path("/proc").iterdir():  # the xrootd serving this port (unshare execs it: one process)
            try:
                if p.name.isdigit() and f"ext-{x.port}" in (p / "cmdline").read_text():
                    pid = int(p.name)
            except OSError:
                pass
        token = x.token("storage.read:/store", "storage.create:/store", "storage.modify:/store")
        h = Hammer(x, token, a.files, a.size, kinds)
        h.timeout = a.timeout
        for i in range(a.files):
            with h._tls() as s:
                s.sendall(h._request("PUT", f"/store/stress/f{i}", {"Connection": "close"}, os.urandom(a.size)))
                h._read_all(s)
        print(f"xrootd pid {pid} port {x.port} config extra {a.extra}; {a.workers} workers, {a.seconds:g} s",
              flush=True)
        threads = [threading.Thread(target=h.worker, daemon=True) for _ in range(a.workers)]
        for t in threads:
            t.start()
        end = time.monotonic() + a.seconds
        alive = True
        while time.monotonic() < end and not h.stop.is_set():
            time.sleep(random.uniform(0.2, 1) if a.pause else 1)
            if a.pause and pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(random.uniform(0, a.pause))
                    os.kill(pid, signal.SIGCONT)
            if not running(pid):
                alive = False
                break
        h.stop.set()
        for t in threads:
            t.join(timeout=35)
        alive = alive and running(pid)
        print(f"requests {h.counts} errors {h.errors}")
        if x.log.exists():
            notes: dict[str, int] = {}
            for line in x.log.read_text(errors="replace").splitlines():
                m = re.search(r"(stalling client|Bridge delaying|Bridge waiting|Unable to find request|"
                              r"disc \S+ \([^)]*\)|Recycle|attempt to reuse)", line)
                if m:
                    key = re.sub(r"\d+:\d+:\d+ ", "", m.group(1))
                    notes[key] = notes.get(key, 0) + 1
            print(f"log notes {notes}")
        print(f"xrootd {'SURVIVED' if alive else 'DIED'} (pid {pid}); log {x.log}", flush=True)
        if not alive:
            log = x.log.read_text(errors="replace") if x.log.exists() else ""
            print("log tail:\n" + log[-3000:])
        return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
