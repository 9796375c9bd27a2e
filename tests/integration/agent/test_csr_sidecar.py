"""The certificate-renewing sidecar (`python -m tpcmesh_agent.csr --renew`) is its container's PID 1: it must stop
on SIGTERM, which the kernel delivers to a PID namespace's init only if it has a handler (else each agent pod's
deletion, and each node of a rolling upgrade, waits out the whole grace period). Run here as PID 1 of a new PID
namespace, signalled from outside it as the container runtime does."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="a PID namespace of its own needs root and unshare")


def write_certificate(out: Path, days: int) -> None:
    """A certificate far from its renewal: the sidecar only sleeps."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=days)).sign(key, hashes.SHA256()))
    (out / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def test_the_renewing_sidecar_as_pid_1_stops_on_sigterm(tmp_path: Path):
    write_certificate(tmp_path, days=30)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1"}  # never called: nothing is due for renewal
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--", sys.executable, "-m",
                              "tpcmesh_agent.csr", "--renew", "--node-name", "node-1", "--out-dir", str(tmp_path)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (inner := children(outer.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert inner, "the sidecar did not start"
        time.sleep(1.5)  # past its start-up, asleep until the renewal is due
        assert outer.poll() is None, outer.communicate()[0]
        os.kill(inner[0], signal.SIGTERM)  # from outside its PID namespace, like runc
        out, _ = outer.communicate(timeout=10)  # ignored, it would sleep on: TimeoutExpired
        assert outer.returncode == 0, out
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait(10)
