"""X509 for tpcmesh: a CA, and host certificates for agents signed by it.

The operator is the CA in a cluster (it signs the agents' CertificateSigningRequests); the local mode
and the tests use the same functions to give each local agent a host certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = dt.timedelta(days=3650)
HOST_LIFETIME = dt.timedelta(days=30)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600, exist_ok=True)
        key_path.write_bytes(self.key_pem)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# a CA key's usage: signing certificates and CRLs (and digital signatures)
CA_KEY_USAGE = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                             encipher_only=False, decipher_only=False)


def cert_builder(subject: x509.Name, issuer: x509.Name, public_key: CertificatePublicKeyTypes,
                 lifetime: dt.timedelta) -> x509.CertificateBuilder:
    """What every certificate made here starts with: a random serial, valid from five minutes ago (a peer's clock
    a little behind still takes it) for ``lifetime``."""
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
    )


def _key_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def new_key() -> rsa.RSAPrivateKey:
    # RSA, not EC: GridFTP's GSI and older XRootD builds handle RSA host keys everywhere.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def create_ca(common_name: str = "tpcmesh CA", lifetime: dt.timedelta = CA_LIFETIME) -> KeyPair:
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpcmesh"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        cert_builder(name, name, key.public_key(), lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def subject_alt_names(names: list[str]) -> x509.SubjectAlternativeName:
    """The SAN extension's value: each name an IP address when it parses as one, else a DNS name."""
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def build_csr(node_name: str, addresses: list[str], key: rsa.RSAPrivateKey) -> bytes:
    """A PEM CSR for an agent's host certificate: CN = node name, SANs = node name + addresses."""
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tpcmesh"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
        .add_extension(subject_alt_names([node_name, *addresses]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def sign_csr(ca: KeyPair, csr_pem: bytes, lifetime: dt.timedelta = HOST_LIFETIME) -> bytes:
    """Sign a host CSR as server and client certificate; returns the PEM certificate."""
    csr = x509.load_pem_x509_csr(csr_pem)
    if not csr.is_signature_valid:
        raise ValueError("CSR signature is invalid")
    ca_cert = ca.certificate()
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([])
    cert = (
        cert_builder(csr.subject, ca_cert.subject, csr.public_key(), lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(san, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                       critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def issue_host_cert(ca: KeyPair, node_name: str, addresses: list[str],
                    lifetime: dt.timedelta = HOST_LIFETIME) -> KeyPair:
    """Key + certificate for a host in one step (local mode and tests)."""
    key = new_key()
    return KeyPair(sign_csr(ca, build_csr(node_name, addresses, key), lifetime), _key_pem(key))


def openssl_subject_hash_name(ca_cert_pem: bytes) -> str:
    """File name (<hash>.0) a CA directory needs for OpenSSL/XRootD/Globus; computed with `openssl x509 -hash`."""
    import subprocess

    out = subprocess.run(["openssl", "x509", "-noout", "-subject_hash"], input=ca_cert_pem,
                         capture_output=True, check=True)
    return out.stdout.decode().strip() + ".0"


def write_ca_dir(ca_cert_pem: bytes, directory: Path) -> Path:
    """A CA directory (certdir) as XRootD's `xrd.tlsca certdir` and Globus expect: <hash>.0 plus the PEM."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca_cert_pem)
    (directory / openssl_subject_hash_name(ca_cert_pem)).write_bytes(ca_cert_pem)
    return directory


def expires_within(cert_pem: bytes, margin: dt.timedelta) -> bool:
    """True when the certificate ends within ``margin`` (time to renew)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc - _now() < margin
