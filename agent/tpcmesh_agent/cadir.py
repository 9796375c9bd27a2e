"""OpenSSL CA directories for the protocol servers and clients (XRootD, GridFTP, curl-alikes): one ``<hash>.0`` entry
per CA of a bundle, with the Globus signing policy gsiftp wants beside it, and the one-line subject names both use."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from cryptography import x509

from .atomic import write_atomically

log = logging.getLogger(__name__)


def write_ca_dir(ca_file: Path, directory: Path) -> None:
    """<hash>.0 entries (one per CA in the bundle) for programs that want an OpenSSL CA directory."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = ca_file.read_bytes()
    write_atomically(directory / "ca.pem", pem)
    blocks = [b + b"-----END CERTIFICATE-----\n" for b in pem.split(b"-----END CERTIFICATE-----") if b"BEGIN" in b]
    for block in blocks:
        try:
            h = subprocess.run(["openssl", "x509", "-noout", "-subject_hash"], input=block.strip() + b"\n",
                               capture_output=True, check=True).stdout.decode().strip()
        except (OSError, subprocess.CalledProcessError) as e:
            log.warning("Could not hash CA certificate for %s: %s", directory, e)
            return
        write_atomically(directory / f"{h}.0", block.strip() + b"\n")
        write_atomically(directory / f"{h}.signing_policy", signing_policy(block).encode())


def signing_policy(ca_pem: bytes) -> str:
    """The Globus signing policy a CA directory entry needs for gsiftp: this CA may sign any subject (which CAs
    are trusted at all is what ca_file says)."""
    return (f"access_id_CA X509 '{one_line_dn(ca_pem)}'\npos_rights globus CA:sign\n"
            "cond_subjects globus '\"*\"'\n")


def one_line_dn(pem: bytes) -> str:
    """A PEM certificate's subject in OpenSSL's one-line form (``/O=tpcmesh/CN=node``): how XrdHttp names a client
    certificate (the gridmap) and how a Globus signing policy names a CA."""
    return one_line_name(x509.load_pem_x509_certificate(pem).subject)


def one_line_name(name: x509.Name) -> str:
    """A name in OpenSSL's one-line form (``/O=tpcmesh/CN=node``)."""
    return "".join(f"/{a.rfc4514_attribute_name}="
                   f"{a.value if isinstance(a.value, str) else a.value.decode(errors='replace')}" for a in name)
