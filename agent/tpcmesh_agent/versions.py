"""The versions of the implementations that make the measurements, so that a version change can be told apart from a
network change.

Found once when the agent starts (``local_versions``): the agent's own package version (importlib.metadata), and each
program's own report of itself, run with a timeout (``xrootd -v``, ``globus-gridftp-server -version``,
``iperf3 --version``; the clients ``xrdcp --version`` and ``globus-url-copy -version``). A program that is missing,
hangs, fails or prints something unexpected is unknown (None): never an error.

The other end's version (the peer's) comes over the protocol itself, after the test's data has moved (movers'
``peer_version``): an XRootD server answers ``query config version`` (xrdfs; the root protocol shares the HTTPS
port), a GridFTP server names its version in its 220 greeting, iperf3's sender reports its own in the JSON it sends
back (``--get-server-output``), and the built-in data server in its ``Server`` header.

Each transferRecord carries ``implementation``: ``{"name", "version", "peer_version", "agent_version"}`` (the
contract's ``implementation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata

from . import __version__

log = logging.getLogger(__name__)

PACKAGE = "tpcmesh-agent"
PROGRAM_TIMEOUT = 15.0  # seconds a program may take to name its version, once at start (a loaded node is slow)
TIMEOUT = 5.0  # seconds the other end may take to answer, after a test
MAX_LENGTH = 64  # the contract's bound on a version string

# a version as the programs print it: digits and dots, then perhaps a suffix (5.6.0-rc1, 3.9+, 13.24)
_V = r"(\d+(?:\.\d+)+(?:[-+~][0-9A-Za-z.+~-]*)?)"
_SAFE = re.compile(r"^[0-9A-Za-z.+~_-]+$")


@dataclass(frozen=True)
class VersionParser:
    """Reads a version out of what a program says of itself: the pattern's group; None for no text, no match, or a
    version longer than the contract allows or with other characters."""

    pattern: re.Pattern[str]

    def __call__(self, text: str | bytes | None) -> str | None:
        if text is None:
            return None
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        m = self.pattern.search(text)
        if m is None:
            return None
        version = m.group(1).rstrip(".-")
        return version if len(version) <= MAX_LENGTH and _SAFE.match(version) else None


# ``5.5.3`` from ``v5.5.3`` (xrootd -v, xrdcp --version, xrdfs … query config version)
parse_xrootd = VersionParser(re.compile(rf"^\s*v?{_V}\s*$", re.MULTILINE))
# ``13.24`` from ``globus_gridftp_server: 13.24 (1653033972-1)`` (globus-gridftp-server -version)
parse_gridftp_server = VersionParser(re.compile(rf"globus_gridftp_server:\s*{_V}"))
# ``10.12`` from ``globus-url-copy: 10.12`` (globus-url-copy -version)
parse_globus_url_copy = VersionParser(re.compile(rf"globus-url-copy:\s*{_V}"))
# ``3.12`` from ``iperf 3.12 (cJSON 1.7.15)`` (iperf3 --version; also the JSON report's start.version)
parse_iperf3 = VersionParser(re.compile(rf"^\s*iperf\s+{_V}", re.MULTILINE))
# ``13.24`` from a GridFTP server's greeting ``220 <host> GridFTP Server 13.24 (gcc64, …) […] ready.``
parse_gridftp_banner = VersionParser(re.compile(rf"GridFTP Server\s+{_V}"))
# ``0.1.0`` from the built-in data server's ``Server: tpcmesh-agent/0.1.0``
parse_agent_server = VersionParser(re.compile(rf"\btpcmesh-agent/{_V}"))


def agent_version() -> str:
    """The installed tpcmesh-agent package's version (its metadata); the module's own when not installed."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return __version__


# name -> (command, parser): what each program says of itself; names are the implementations' (Debian packages')
PROGRAMS: dict[str, tuple[list[str], Callable[[str | bytes | None], str | None]]] = {
    "xrootd": (["xrootd", "-v"], parse_xrootd),
    "globus-gridftp-server": (["globus-gridftp-server", "-version"], parse_gridftp_server),
    "iperf3": (["iperf3", "--version"], parse_iperf3),
    "xrdcp": (["xrdcp", "--version"], parse_xrootd),
    "globus-url-copy": (["globus-url-copy", "-version"], parse_globus_url_copy),
}


def program_version(name: str, timeout: float = PROGRAM_TIMEOUT) -> str | None:
    """What ``name`` (a key of PROGRAMS) says its version is; None when it is missing, hangs, or says nothing
    recognisable. The exit status is not trusted (globus-url-copy -version exits 1 after printing it)."""
    argv, parse = PROGRAMS[name]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("Could not ask %s its version: %s", name, e)
        return None
    return parse(done.stdout) or parse(done.stderr)


def local_versions(timeout: float = PROGRAM_TIMEOUT) -> dict[str, str | None]:
    """{"tpcmesh-agent": …, "xrootd": …, "globus-gridftp-server": …, "iperf3": …, "xrdcp": …,
    "globus-url-copy": …}: this node's implementations, None where unknown."""
    # side by side: an agent's start waits for the slowest program, not for all of them in turn (xrootd -v alone
    # loads dozens of libraries, seconds on a loaded node)
    with ThreadPoolExecutor(max_workers=len(PROGRAMS)) as pool:
        asked = dict(zip(PROGRAMS, pool.map(lambda name: program_version(name, timeout), PROGRAMS), strict=True))
    return {PACKAGE: agent_version(), **asked}


def implementation(name: str, versions: dict[str, str | None], peer_version: str | None) -> dict[str, str | None]:
    """A record's ``implementation``: the program that did this end's part (``name``), its version here, the other
    end's, and this agent's."""
    return {"name": name, "version": versions.get(name), "peer_version": peer_version,
            "agent_version": versions.get(PACKAGE)}


async def xrootd_server_version(host: str, port: int, timeout: float = TIMEOUT) -> str | None:
    """An XRootD server's version as it answers ``query config version`` (root protocol), None when it does not."""
    from .movers.base import url_host
    from .movers.external import run_program

    try:
        proc = await run_program(["xrdfs", f"root://{url_host(host)}:{port}", "query", "config", "version"],
                                 time.monotonic() + timeout,
                                 env={"XRD_CONNECTIONRETRY": "1", "XRD_REQUESTTIMEOUT": str(int(timeout)),
                                      "XRD_CONNECTIONWINDOW": str(int(timeout))})
    except OSError:
        return None
    return parse_xrootd(proc.stdout) if proc.returncode == 0 else None


async def gridftp_banner_version(host: str, port: int, timeout: float = TIMEOUT) -> str | None:
    """A GridFTP server's version from its 220 greeting (read, then the connection closed: no login)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return None
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
        return parse_gridftp_banner(line) if line.startswith(b"220") else None
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
