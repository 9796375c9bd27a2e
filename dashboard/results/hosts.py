"""Both ends' host telemetry and why TCP waited (the contract's `host` and the sender's tcp figures) as the pair
page shows them beside the throughput: one short line per end, the full figures in a tooltip. Pure."""

from __future__ import annotations

from typing import Any

ENDS = (("source", "src"), ("destination", "dst"))


def _num(v: Any, unit: str = " %") -> str:
    return "?" if v is None else f"{v:.0f}{unit}"


def _bytes(v: Any) -> str:
    return "?" if v is None else f"{v / 1e6:.1f} MB"


def end_line(end: dict[str, Any] | None) -> str:
    """'busiest core 97 % (softirq 40 %), saturated 80 % of the time, 3 drops, xrootd 85 %'; '' when not recorded."""
    if not end:
        return ""
    parts = []
    cpu = end.get("cpu") or {}
    if cpu:
        core = f'busiest core {_num(cpu.get("busiest_core_pct"))} (softirq {_num(cpu.get("busiest_core_softirq_pct"))})'
        if cpu.get("saturated_pct"):
            core += f', saturated {_num(cpu["saturated_pct"])} of the time'
        parts.append(core)
    nic = end.get("interface") or {}
    if nic:
        drops = sum(nic.get(k) or 0 for k in ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors"))
        drops += sum((nic.get("driver") or {}).values())
        parts.append(f'{drops} drop{"" if drops == 1 else "s"}/errors on {nic.get("name") or "?"}')
    procs = end.get("processes") or {}
    if procs:  # the agent's busiest own program
        name, top = max(procs.items(), key=lambda kv: kv[1].get("cpu_pct") or 0)
        parts.append(f'{name} {_num(top.get("cpu_pct"))}')
    return ", ".join(parts)


def end_details(end: dict[str, Any] | None) -> str:
    """The limits and the rest, for a tooltip."""
    if not end:
        return ""
    lim = end.get("limits") or {}
    cpu = end.get("cpu") or {}
    mem = end.get("memory") or {}
    return "; ".join([
        ", ".join([f'tcp_rmem max {_bytes(lim.get("tcp_rmem_max_bytes"))}',
                   f'tcp_wmem max {_bytes(lim.get("tcp_wmem_max_bytes"))}',
                   f'rmem_max {_bytes(lim.get("rmem_max_bytes"))}', f'wmem_max {_bytes(lim.get("wmem_max_bytes"))}',
                   lim.get("congestion_control") or "?", f'MTU {lim.get("mtu") or "?"}',
                   f'speed {_num(lim.get("speed_mbps"), " Mbit/s")}']),
        f'CPU {_num(cpu.get("busy_pct"))} of {cpu.get("cores") or "?"} cores, iowait {_num(cpu.get("iowait_pct"))}',
        f'memory available at least {_bytes(mem.get("available_min_bytes"))}'])


def waited(tcp: dict[str, Any] | None) -> str:
    """'receive window 87 %, send buffer 2 % of 1.2 s busy': the sender's limited shares; '' when unknown."""
    sender = (tcp or {}).get("sender") or {}
    rwnd, sndbuf = sender.get("rwnd_limited_fraction"), sender.get("sndbuf_limited_fraction")
    if rwnd is None and sndbuf is None:
        return ""
    busy = sender.get("busy_ms")
    return (f'receive window {_num(None if rwnd is None else rwnd * 100)}, send buffer '
            f'{_num(None if sndbuf is None else sndbuf * 100)} of {"?" if busy is None else f"{busy / 1000:.1f}"} s '
            "busy")


def view(host: dict[str, Any] | None, tcp: dict[str, Any] | None) -> dict[str, Any]:
    """What a pair page row shows: {"ends": [(short name, line, details)], "waited": text}."""
    host = host or {}
    return {"ends": [(short, end_line(host.get(end)), end_details(host.get(end)))
                     for end, short in ENDS if host.get(end)],
            "waited": waited(tcp)}
