"""The program and versions that made a measurement (the contract's `implementation`) as pages show them, and what
changed between two runs of a cell: a version change is told apart from a network change. Pure."""

from __future__ import annotations

from typing import Any

# the versions compared between runs, and how a change of each is named
PARTS = (("version", ""), ("peer_version", "source "), ("agent_version", "agent "))


def label(impl: dict[str, Any] | None) -> str:
    """'xrootd 5.5.3, source 5.5.3, agent 0.1.0'; '' when not recorded; '?' for a version not known."""
    if not impl:
        return ""
    text = [f'{impl.get("name") or "?"} {impl.get("version") or "?"}']
    if impl.get("peer_version") is not None:
        text.append(f'source {impl["peer_version"]}')
    if impl.get("agent_version") is not None and impl.get("name") != "tpcmesh-agent":
        text.append(f'agent {impl["agent_version"]}')
    return ", ".join(text)


def change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """What differs between two runs' implementations: 'xrootd 5.5.3 → 5.6.1; agent 0.1.0 → 0.2.0'; None when
    nothing does, or when either run has no record of it (an older record, a failed run) or a version is unknown."""
    if not before or not after:
        return None
    if before.get("name") != after.get("name"):
        return f'{label(before)} → {label(after)}'
    name = after.get("name") or "?"
    found = []
    for key, prefix in PARTS:
        if key == "agent_version" and name == "tpcmesh-agent":  # the built-in mover's version is the agent's
            continue
        old, new = before.get(key), after.get(key)
        if old is not None and new is not None and old != new:
            what = "agent" if key == "agent_version" else f"{prefix}{name}"
            found.append(f"{what} {old} → {new}")
    return "; ".join(found) or None
