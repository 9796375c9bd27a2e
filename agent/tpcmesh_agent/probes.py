"""Latency probe: TCP-connect round-trip time to a peer (min / median / max in milliseconds).

Each sample is the kernel's own measurement of the handshake (TCP_INFO's ``rtt`` right after connect: the time from
the SYN leaving to the SYN/ACK arriving, in microseconds), so a busy agent's event loop does not add to it; where the
kernel gives none, the wall time around ``connect``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import time

from .tcpsampler import read_info


async def tcp_connect_rtt(host: str, port: int, count: int = 5, timeout: float = 3.0,
                          interval: float = 0.05) -> dict:
    """Connect ``count`` times; each sample is the time of the TCP handshake (SYN -> SYN/ACK). A host name is
    resolved once, before the samples, so name resolution is not part of the RTT."""
    samples: list[float] = []
    errors: list[str] = []
    target = host
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
        target = str(infos[0][4][0])
    except (OSError, TimeoutError) as e:
        return _result(host, port, count, [], [f"cannot resolve {host}: {e}"])
    for i in range(count):
        t0 = time.perf_counter()
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(target, port), timeout)
        except TimeoutError:
            errors.append(f"connect to {host}:{port} timed out after {timeout:g} s")
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            errors.append(f"connect to {host}:{port} failed: {reason}")
        else:
            wall_ms = (time.perf_counter() - t0) * 1000
            samples.append(_handshake_ms(writer.get_extra_info("socket")) or wall_ms)
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        if i + 1 < count and interval:
            await asyncio.sleep(interval)
    return _result(host, port, count, samples, errors)


def _handshake_ms(sock: socket.socket | None) -> float | None:
    """The kernel's RTT of a just-connected socket's handshake (its first and only sample), or None."""
    info = read_info(sock) if sock is not None else None
    rtt_us = info.get("rtt") if info else None
    return rtt_us / 1000 if rtt_us else None


def _result(host: str, port: int, count: int, samples: list[float], errors: list[str]) -> dict:
    return {
        "host": host,
        "port": port,
        "count": count,
        "samples": len(samples),
        "min_ms": min(samples) if samples else None,
        "median_ms": statistics.median(samples) if samples else None,
        "max_ms": max(samples) if samples else None,
        "error": None if samples else (errors[0] if errors else "no samples"),
        "errors": len(errors),
    }
