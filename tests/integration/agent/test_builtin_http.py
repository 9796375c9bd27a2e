"""The built-in data server speaks standard HTTP/1.1 and the WLCG HTTP-TPC pull, checked with curl."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
import zlib

import pytest

pytestmark = pytest.mark.integration

SIZE = 3_000_001


def curl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--noproxy", "*", *args], capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def agents(module_agent_factory):
    src = module_agent_factory()
    dst = module_agent_factory(marker_interval=0.2)
    tls_src = module_agent_factory(builtin_tls=True)
    return src, dst, tls_src


@pytest.fixture(scope="module")
def fileset(agents):
    src, _, tls_src = agents
    fs = src.file_set(count=2, size=SIZE)
    assert tls_src.file_set(count=2, size=SIZE) == fs
    return fs


def _url(agent, fs, i=0, scheme="http"):
    return f"{scheme}://{agent.address}:{agent.builtin_port}/files/{fs['name']}/{fs['files'][i]['name']}"


def test_get_head_and_range(agents, fileset):
    src = agents[0]
    path = src.data_dir / "data" / "sets" / fileset["name"] / fileset["files"][0]["name"]
    data = path.read_bytes()
    full = curl("-D", "-", "-o", "/dev/stdout", _url(src, fileset))
    head, _, body = full.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and f"Content-Length: {SIZE}".encode() in head
    assert b"Accept-Ranges: bytes" in head and body == data
    assert f"adler32:{zlib.adler32(body):08x}" == fileset["files"][0]["checksum"]
    rng = curl("-D", "-", "-o", "/dev/stdout", "-r", "1000-1999", _url(src, fileset))
    head, _, body = rng.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 206") and f"Content-Range: bytes 1000-1999/{SIZE}".encode() in head
    assert body == data[1000:2000]
    tail = curl("-o", "/dev/stdout", "-r", "-10", _url(src, fileset))
    assert tail.stdout == data[-10:]
    digest = curl("-I", "-H", "Want-Digest: adler32", _url(src, fileset))
    assert f"Digest: adler32={fileset['files'][0]['checksum'][8:]}".encode() in digest.stdout
    head_only = curl("-I", _url(src, fileset))
    assert b"200 OK" in head_only.stdout and f"Content-Length: {SIZE}".encode() in head_only.stdout
    bad = curl("-o", "/dev/null", "-w", "%{http_code}", "-r", f"{SIZE}-", _url(src, fileset))
    assert bad.stdout == b"416"
    # keep-alive: two requests on one connection
    two = curl("-v", "-o", "/dev/null", "-o", "/dev/null", _url(src, fileset), _url(src, fileset, 1))
    assert b"Re-using existing connection" in two.stderr or b"Reusing existing" in two.stderr


@pytest.mark.parametrize("path, code", [
    ("/files/{set}/nope.dat", "404"),
    ("/files/{set}/..%2F..%2Fetc%2Fpasswd", "400"),
    ("/files/..", "404"),
    ("/etc/passwd", "404"),
])
def test_get_bad_paths(agents, fileset, path, code):
    src = agents[0]
    url = f"http://{src.address}:{src.builtin_port}" + path.format(set=fileset["name"])
    assert curl("--path-as-is", "-o", "/dev/null", "-w", "%{http_code}", url).stdout.decode() == code


@pytest.mark.parametrize("streams", [1, 4])
def test_copy_pull_with_curl(agents, fileset, streams):
    src, dst, _ = agents
    name = f"pulled-{streams}.dat"
    r = curl("-X", "COPY", "-H", f"Source: {_url(src, fileset)}", "-H", "Credential: none",
             "-H", "RequireChecksumVerification: true",
             "-H", f"X-Number-Of-Streams: {streams}", "-H", f"Authorization: Bearer {dst.token}",
             "-D", "-", f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}")
    text = r.stdout.decode()
    assert text.startswith("HTTP/1.1 202 Accepted") and "Content-Type: text/perf-marker-stream" in text
    body = text.partition("\r\n\r\n")[2]
    assert body.startswith("Perf Marker\nTimestamp: ")
    assert "Stripe Index: 0\n" in body and "Total Stripe Count: 1\nEnd\n" in body
    assert f"Stripe Bytes Transferred: {SIZE}\n" in body
    assert body.rstrip("\n").splitlines()[-1] == "success: Created"
    got = (dst.data_dir / "data" / "incoming" / name).read_bytes()
    assert f"adler32:{zlib.adler32(got):08x}" == fileset["files"][0]["checksum"]
    d = curl("-X", "DELETE", "-H", f"Authorization: Bearer {dst.token}", "-o", "/dev/null", "-w", "%{http_code}",
             f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}")
    assert d.stdout == b"204" and not (dst.data_dir / "data" / "incoming" / name).exists()


@pytest.mark.parametrize("verify", ["true", "false"])
def test_a_received_file_answers_want_digest_from_its_landing(agents, fileset, verify):
    """gfal2 checks a copy's checksum at the destination with Want-Digest: the COPY records the landed file's
    adler32 once (verified or computed right after the last byte), so the answer needs no second read."""
    src, dst, _ = agents
    name = f"digest-{verify}.dat"
    r = curl("-X", "COPY", "-H", f"Source: {_url(src, fileset, 1)}", "-H", f"RequireChecksumVerification: {verify}",
             "-H", "X-Number-Of-Streams: 3", "-H", f"Authorization: Bearer {dst.token}",
             f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}")
    assert r.stdout.decode().rstrip("\n").splitlines()[-1] == "success: Created"
    landed = dst.data_dir / "data" / "incoming" / name
    url = f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}"
    want = f"Digest: adler32={fileset['files'][1]['checksum'][8:]}".encode()
    assert want in curl("-I", "-H", "Want-Digest: adler32", "-H", f"Authorization: Bearer {dst.token}", url).stdout
    # the same size and mtime with other bytes: the answer comes from the record, not from reading the file again
    st = landed.stat()
    landed.write_bytes(bytes(SIZE))
    os.utime(landed, ns=(st.st_atime_ns, st.st_mtime_ns))
    for method in (("-I",), ("-o", "/dev/null", "-D", "-")):
        digest = curl(*method, "-H", "Want-Digest: ADLER32", "-H", f"Authorization: Bearer {dst.token}", url)
        assert want in digest.stdout, digest.stdout
    os.utime(landed)  # changed: computed from what the file now holds
    digest = curl("-I", "-H", "Want-Digest: adler32", "-H", f"Authorization: Bearer {dst.token}", url)
    zeros = zlib.adler32(bytes(SIZE))
    assert f"Digest: adler32={zeros:08x}".encode() in digest.stdout, digest.stdout


def test_copy_pull_over_tls_from_a_tls_source(agents, fileset):
    _, dst, tls_src = agents
    r = curl("-X", "COPY", "-H", f"Source: {_url(tls_src, fileset, 1, 'https')}", "-H", "Credential: none",
             "-H", "X-Number-Of-Streams: 2", "-H", f"Authorization: Bearer {dst.token}",
             f"http://{dst.address}:{dst.builtin_port}/files/incoming/tls.dat")
    assert r.stdout.decode().rstrip("\n").splitlines()[-1] == "success: Created"
    got = (dst.data_dir / "data" / "incoming" / "tls.dat").read_bytes()
    assert f"adler32:{zlib.adler32(got):08x}" == fileset["files"][1]["checksum"]
    # the TLS data port serves HTTPS with the agent's host certificate
    ok = curl("--cacert", str(tls_src.ca_file), "-o", "/dev/null", "-w", "%{http_code}",
              _url(tls_src, fileset, 0, "https"))
    assert ok.stdout == b"200"


def test_copy_failures_end_with_a_failure_line(agents, fileset):
    src, dst, _ = agents
    base = f"http://{dst.address}:{dst.builtin_port}/files/incoming/x.dat"
    auth = ("-H", f"Authorization: Bearer {dst.token}")
    missing = curl("-X", "COPY", "-H", f"Source: http://{src.address}:{src.builtin_port}/files/{fileset['name']}/no",
                   *auth, base)
    last = missing.stdout.decode().rstrip("\n").splitlines()[-1]
    assert last.startswith("failure: ") and "answered 404" in last
    refused = curl("-X", "COPY", "-H", f"Source: http://{src.address}:9/x", *auth, base)
    assert refused.stdout.decode().rstrip("\n").splitlines()[-1].startswith("failure: cannot connect")
    assert not (dst.data_dir / "data" / "incoming" / "x.dat").exists()
    for headers, code in [((), "400"),  # no Source
                          (("-H", f"Source: {_url(src, fileset)}", "-H", "Credential: gridsite"), "400"),
                          (("-H", f"Source: {_url(src, fileset)}", "-H", "X-Number-Of-Streams: 101"), "400"),
                          (("-H", "Source: file:///etc/passwd"), "400")]:
        r = curl("-X", "COPY", *headers, *auth, "-o", "/dev/null", "-w", "%{http_code}", base)
        assert r.stdout.decode() == code, headers
    noauth = curl("-X", "COPY", "-H", f"Source: {_url(src, fileset)}", "-o", "/dev/null", "-w", "%{http_code}", base)
    assert noauth.stdout == b"401"
    elsewhere = curl("-X", "COPY", "-H", f"Source: {_url(src, fileset)}", *auth, "-o", "/dev/null", "-w",
                     "%{http_code}", f"http://{dst.address}:{dst.builtin_port}/files/{fileset['name']}/y")
    assert elsewhere.stdout == b"403"


def test_copy_with_checksum_verification_catches_corruption(agents):
    src, dst, _ = agents
    fs = src.file_set(count=1, size=5000)
    victim = src.data_dir / "data" / "sets" / fs["name"] / fs["files"][0]["name"]
    victim.write_bytes(b"\0" * 5000)  # same size, other content: the manifest's Digest no longer matches
    r = curl("-X", "COPY", "-H", f"Source: {_url(src, fs)}", "-H", "RequireChecksumVerification: true",
             "-H", f"Authorization: Bearer {dst.token}",
             f"http://{dst.address}:{dst.builtin_port}/files/incoming/corrupt.dat")
    last = r.stdout.decode().rstrip("\n").splitlines()[-1]
    assert last.startswith(f"failure: checksum mismatch: source says {fs['files'][0]['checksum']}"), last
    assert not (dst.data_dir / "data" / "incoming" / "corrupt.dat").exists()


class _RefusesWantDigest(http.server.BaseHTTPRequestHandler):
    """Behaves like XRootD 5.5 without a checksum configured: 405 to any request carrying Want-Digest."""

    protocol_version = "HTTP/1.1"
    data = bytes(range(256)) * 4000
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.seen.append(f"{self.command} want-digest={self.headers.get('Want-Digest')}")
        if self.headers.get("Want-Digest"):
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = 0, len(self.data)
        if rng := self.headers.get("Range"):
            a, b = rng.removeprefix("bytes=").split("-")
            start, end = int(a), int(b) + 1
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(self.data[start:end])


@pytest.mark.parametrize("streams", [1, 4])
def test_copy_retries_without_want_digest_when_the_source_refuses_it(agents, streams):
    _, dst, _ = agents
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusesWantDigest)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        source = f"http://127.0.0.1:{srv.server_address[1]}/f"
        base = f"http://{dst.address}:{dst.builtin_port}/files/incoming/refuser-{streams}.dat"
        args = ("-X", "COPY", "-H", f"Source: {source}", "-H", f"X-Number-Of-Streams: {streams}",
                "-H", f"Authorization: Bearer {dst.token}")
        _RefusesWantDigest.seen.clear()
        ok = curl(*args, base)
        assert ok.stdout.decode().rstrip("\n").splitlines()[-1] == "success: Created"
        assert all("want-digest=None" in s for s in _RefusesWantDigest.seen)  # not asked when not verifying
        assert (dst.data_dir / "data" / "incoming" / f"refuser-{streams}.dat").read_bytes() == _RefusesWantDigest.data
        _RefusesWantDigest.seen.clear()
        verify = curl(*args, "-H", "RequireChecksumVerification: true", base)
        last = verify.stdout.decode().rstrip("\n").splitlines()[-1]
        assert last == "failure: checksum verification asked for, but the source sent no adler32 Digest"
        assert _RefusesWantDigest.seen[0].endswith("want-digest=adler32")  # asked once, then again without
        assert any(s.endswith("want-digest=None") for s in _RefusesWantDigest.seen[1:])
    finally:
        srv.shutdown()
        srv.server_close()


def test_received_files_need_the_token_to_be_read(agents, fileset):
    src, dst, _ = agents
    name = "readable-by-the-agent-only.dat"
    pulled = curl("-X", "COPY", "-H", f"Source: {_url(src, fileset)}", "-H", f"Authorization: Bearer {dst.token}",
                  f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}")
    assert pulled.stdout.decode().rstrip("\n").splitlines()[-1] == "success: Created"
    url = f"http://{dst.address}:{dst.builtin_port}/files/incoming/{name}"
    for args in ((), ("-I",), ("-H", "Authorization: Bearer not-the-token")):
        assert curl(*args, "-o", "/dev/null", "-w", "%{http_code}", url).stdout == b"401", args
    ok = curl("-H", f"Authorization: Bearer {dst.token}", "-o", "/dev/stdout", url)
    assert f"adler32:{zlib.adler32(ok.stdout):08x}" == fileset["files"][0]["checksum"]
    assert curl("-o", "/dev/null", "-w", "%{http_code}", _url(src, fileset)).stdout == b"200"  # sets stay open


def test_idle_connections_are_closed(agent_factory):
    """Connections that send no request (or nothing more after one) are closed after the idle timeout: no thread
    per forgotten connection piles up in the agent."""
    import socket
    import time

    from tests.integration.agent.test_builtin_stalls import threads, wait_threads

    agent = agent_factory(idle_timeout=1)
    fs = agent.file_set(count=1, size=1000)
    before = threads(agent)
    idle = [socket.create_connection((agent.address, agent.builtin_port)) for _ in range(20)]
    kept = socket.create_connection((agent.address, agent.builtin_port))
    kept.sendall(f"GET /files/{fs['name']}/{fs['files'][0]['name']} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    t0 = time.monotonic()
    for s in [*idle, kept]:
        s.settimeout(10)
        data = b""
        while chunk := s.recv(65536):  # the answer (kept), then the server's close
            data += chunk
        assert (data == b"") if s is not kept else data.startswith(b"HTTP/1.1 200 OK")
        s.close()
    assert time.monotonic() - t0 < 20  # closed by the idle timeout: each recv would give up after 10 s
    wait_threads(agent, before)
