"""Who may log in to the agent's GridFTP server (gsiftp): a grid-mapfile of the mesh's own host certificates.

GSI authenticates a client by its certificate chain (any CA of the agent's CA directory, which may hold a site's CA
for a gsiftp:// endpoint), and then the server (``-auth-level 1``, the file named by ``GRIDMAP``) looks the
client's subject up here: a subject not listed is refused at login with ``530 Login incorrect. :
globus_gss_assist: Gridmap lookup failure: Could not map <subject>``. A proxy counts as the certificate it was made
from. globus-gridftp-server reads the file for every new connection, so a change takes effect at the next login,
without a restart (each write replaces it in one rename: a login reads the old list or the new one).

The file lists:
- the agent's own host certificate: its globus-url-copy writes into its own server (``incoming/``, ``/dev/null``)
  and holds that certificate for its own server's side of a copy with an external endpoint;
- the host certificate of every mesh member the operator named (``POST /api/v1/filesets`` with ``mesh``: the
  node names of the run's agents, sent to each of them as the run starts). Destinations pull from this server with
  their host certificates. A member's subject is this agent's own with the CN set to the member's node name: the
  agents' CA signs only ``CN=<the requester's node>`` (operator certs.review, the agent's csr.py), so that subject
  is what the CA vouches for that node. The newest list replaces the previous one: a node that left the mesh is
  refused from the next run's start on.

External endpoints need no line: in a copy with one, the endpoint's server meets this server only on the data
channel, which is not authenticated (``-nodcau``), and the site's credential goes to the endpoint's server only.
The list lives in the runtime directory (``mesh.json``, no server exports it) and survives an agent restart.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..atomic import write_atomically
from ..cadir import one_line_dn, one_line_name

log = logging.getLogger(__name__)

GRIDMAP = "grid-mapfile"
STATE = "mesh.json"
MAX_MEMBERS = 10_000
# a Kubernetes node name (RFC 1123 subdomain), which is also what a lab node is called
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# one writer at a time (the control API's threads, a server's start): write_atomically's temporary name is fixed
_WRITING = threading.Lock()


class MeshError(ValueError):
    """A member list that cannot be admitted (the message names the entry and what is expected)."""


def validate_members(given: Any) -> list[str]:
    """``mesh``: a list of node names (RFC 1123: lowercase letters, digits, '-' and '.'), sorted and unique."""
    if not isinstance(given, list) or len(given) > MAX_MEMBERS:
        raise MeshError(f"mesh must be a list of at most {MAX_MEMBERS} node names (the mesh's agents), got "
                        f"{type(given).__name__}" + (f" of {len(given)}" if isinstance(given, list) else ""))
    for name in given:
        if not isinstance(name, str) or not NODE_NAME.match(name):
            raise MeshError(f"mesh: {name!r} is not a node name (lowercase letters, digits, '-' and '.', at most "
                            "253 characters)")
    return sorted(set(given))


def member_subject(own_cert_pem: bytes, node: str) -> str:
    """The subject the agents' CA gives ``node``'s host certificate: this agent's own with the CN set to ``node``."""
    own = x509.load_pem_x509_certificate(own_cert_pem).subject
    if len(own.get_attributes_for_oid(NameOID.COMMON_NAME)) != 1:
        raise MeshError(f"the host certificate's subject {one_line_name(own)} has no single CN: the members' subjects "
                        "cannot be derived from it")
    rdns = [x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, node)
                                            if a.oid == NameOID.COMMON_NAME else a for a in rdn]) for rdn in own.rdns]
    return one_line_name(x509.Name(rdns))


def gridmap_text(subjects: Iterable[str], user: str) -> str:
    """One ``"<subject>" <user>`` line per subject, every one mapped to the server's own user (a server that is not
    root cannot switch to another: "Unable to set the gid of the server process"). A subject the file could not hold
    as one quoted literal is refused."""
    lines = []
    for subject in dict.fromkeys(subjects):
        if not subject.startswith("/") or any(c in subject for c in '"\n\r\\'):
            raise MeshError(f"certificate subject {subject!r} cannot be written into the grid-mapfile")
        lines.append(f'"{subject}" {user}\n')
    return "".join(lines)


def server_user(settings: Any) -> str:
    """The user the GridFTP server runs as (supervisor: run_user when the agent is root, else the agent's own)."""
    if os.geteuid() == 0 and settings.run_user:
        return str(settings.run_user)
    return pwd.getpwuid(os.geteuid()).pw_name


class GridftpAccess:
    """The member list (persisted) and the grid-mapfile made from it and the agent's host certificate."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.directory = Path(settings.data_dir) / "servers"

    @property
    def enabled(self) -> bool:
        """Whether this agent runs a gsiftp server (anonymous ftp:// has no grid-mapfile)."""
        s = self.settings
        return "gridftp" in s.protocols and bool(s.gsiftp)

    @property
    def gridmap(self) -> Path:
        return self.directory / GRIDMAP

    @property
    def state(self) -> Path:
        return self.directory / STATE

    def members(self) -> list[str]:
        """The node names last named by the operator (none before the first run, or when the file is unreadable)."""
        try:
            return validate_members(json.loads(self.state.read_text())["members"])
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("Ignored the mesh member list %s (%s): only this agent's own certificate is admitted until "
                        "the operator names the members again", self.state, e)
            return []

    def set_members(self, given: Any) -> list[str]:
        """Replace the member list (MeshError when it is not one) and rewrite the grid-mapfile."""
        members = validate_members(given)
        with _WRITING:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.state, json.dumps({"members": members}).encode(), 0o600)
            if self.enabled:
                self._write()
        log.info("Admitted %d mesh member(s) to GridFTP: %s", len(members), ", ".join(members) or "none")
        return members

    def write(self) -> Path:
        """The grid-mapfile (readable by the server's user) from the host certificate and the member list."""
        with _WRITING:
            return self._write()

    def _write(self) -> Path:
        s = self.settings
        if s.tls_cert is None:
            raise MeshError("gsiftp needs tls_cert: the grid-mapfile names the host certificate's subject")
        own_pem = Path(s.tls_cert).read_bytes()
        own = one_line_dn(own_pem)
        text = gridmap_text([own, *(member_subject(own_pem, n) for n in self.members())], server_user(s))
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.gridmap, text.encode(), 0o644)
        return self.gridmap
