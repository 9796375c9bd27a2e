"""Path probe: the hops from this node to a peer and the path MTU (iputils tracepath), with the MTU of the
interface the route leaves by (ip route get + /sys/class/net). tracepath has no machine-readable output, so its
text is parsed here (parse_tracepath, pure); mtr --json would need mtr on every node."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

# " 2:  198.51.100.1    0.101ms asymm  3", " 3:  198.51.100.9   0.2ms reached", " 4:  no reply",
# " 1?: [LOCALHOST]   pmtu 1400" (the ? lines are tracepath's first guesses, before a reply)
_HOP = re.compile(r"^\s*(\d+)(\?)?:\s+(.*)$")
_RTT = re.compile(r"\b([\d.]+)ms\b")
_PMTU = re.compile(r"\bpmtu (\d+)\b")
_RESUME = re.compile(r"^\s*Resume:\s*pmtu (\d+)(?:\s+hops (\d+))?")

SYS_NET = Path("/sys/class/net")


class PathProbeError(Exception):
    pass


def parse_tracepath(text: str) -> dict[str, Any]:
    """tracepath -n output -> {hops: [{ttl, address, rtt_ms}], pmtu, reached}. A hop that did not answer has
    address None. A TTL tracepath printed twice (it re-sends after learning a smaller MTU) counts once, by its
    last answer."""
    hops: dict[int, dict[str, Any]] = {}
    pmtu: int | None = None
    reached = False
    for line in text.splitlines():
        resume = _RESUME.match(line)
        if resume:
            pmtu = int(resume.group(1))
            continue
        m = _HOP.match(line)
        if not m:
            continue
        ttl, guess, rest = int(m.group(1)), m.group(2), m.group(3)
        found = _PMTU.search(rest)
        if found:
            pmtu = int(found.group(1))
        if guess or rest.startswith("[LOCALHOST]"):
            continue
        word = rest.split()[0] if rest.split() else ""
        if rest.startswith("no reply") or not _looks_like_address(word):
            hops.setdefault(ttl, {"ttl": ttl, "address": None, "rtt_ms": None})
            continue
        rtt = _RTT.search(rest)
        hops[ttl] = {"ttl": ttl, "address": word, "rtt_ms": float(rtt.group(1)) if rtt else None}
        if "reached" in rest.split():
            reached = True
    return {"hops": [hops[t] for t in sorted(hops)], "pmtu": pmtu, "reached": reached}


def _looks_like_address(word: str) -> bool:
    return bool(word) and (":" in word or word.replace(".", "").isdigit())


def interface_mtu(dev: str, root: Path = SYS_NET) -> int | None:
    try:
        return int((root / dev / "mtu").read_text().strip())
    except (OSError, ValueError):
        return None


async def _run(argv: list[str], timeout: float) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise PathProbeError(f"{argv[0]} did not finish within {timeout:g} s") from None
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def route_interface(host: str, timeout: float = 5.0) -> str | None:
    """The interface the kernel's route to ``host`` leaves by (None when ip is missing or has no route)."""
    if shutil.which("ip") is None:
        return None
    rc, out, _ = await _run(["ip", "-j", "route", "get", host], timeout)
    try:
        routes = json.loads(out) if rc == 0 else []
    except ValueError:
        return None
    return routes[0].get("dev") if routes and isinstance(routes[0], dict) else None


async def _tracepath(host: str, max_hops: int, timeout: float) -> tuple[int | None, str, str]:
    """(exit code, None when stopped at ``timeout``; the output so far; stderr). Each hop that does not answer
    costs tracepath about 4 s, so a path that goes silent can outlast the timeout: the hops seen until then are
    kept. tracepath buffers its output in a pipe; stdbuf (coreutils) makes it hand over each line."""
    argv = ["tracepath", "-n", "-m", str(max_hops), host]
    if shutil.which("stdbuf"):
        argv = ["stdbuf", "-oL", *argv]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    lines: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            lines.append(line.decode(errors="replace"))
        await proc.wait()

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, "".join(lines), ""
    err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
    return proc.returncode or 0, "".join(lines), err


async def trace_path(host: str, max_hops: int = 30, timeout: float = 60.0) -> dict[str, Any]:
    """The path record for ``host``: hops, pmtu, reached, interface, interface_mtu, error. Whether the path MTU is
    smaller than the interface's is the dashboard's call (results.paths), from these two figures."""
    result: dict[str, Any] = {"host": host, "hops": [], "pmtu": None, "reached": False, "interface": None,
                              "interface_mtu": None, "error": None}
    if shutil.which("tracepath") is None:
        result["error"] = "tracepath is not installed on this node (Debian package iputils-tracepath)"
        return result
    try:
        dev = await route_interface(host)
    except PathProbeError as e:
        result["error"] = str(e)
        return result
    rc, out, err = await _tracepath(host, max_hops, timeout)
    result.update(parse_tracepath(out))
    result["interface"] = dev
    result["interface_mtu"] = interface_mtu(dev) if dev else None
    if rc is None:
        result["error"] = f"tracepath {host} did not finish within {timeout:g} s (the hops until then are kept)"
    elif rc != 0 and not result["hops"]:
        result["error"] = f"tracepath {host} failed (exit {rc}): {(err or out).strip()[:300]}"
    elif not result["reached"]:
        result["error"] = f"{host} not reached within {max_hops} hops"
    return result
