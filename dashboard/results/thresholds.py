"""A benchmark's grid thresholds: the contract's keys, their validation, the effective bounds and a cell's state.

The TransferBenchmark's `spec.thresholds`, passed unchanged by the operator as `benchmark.thresholds`:
{goodGbps, warnGbps, goodRttMs, warnRttMs, efficiency: {warning, critical}}, each optional. Throughput (Gbit/s,
also iperf3) is better when higher, RTT (ms) when lower. Efficiency (a cell's measured ÷ its pair's path capacity,
results.diagnosis) is judged on its own bounds: ok from ``warning``, a warning from ``critical``, critical below,
both in (0, 1] with warning above critical. Pure functions, no database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# contract key -> (kind, level)
KEYS: dict[str, tuple[str, str]] = {
    "goodGbps": ("throughput", "ok"),
    "warnGbps": ("throughput", "warning"),
    "goodRttMs": ("latency", "ok"),
    "warnRttMs": ("latency", "warning"),
}
DEFAULTS: dict[str, dict[str, float]] = {
    "throughput": {"ok": 30.0, "warning": 10.0},  # the PRP grid's defaults
    "latency": {"ok": 20.0, "warning": 80.0},
}
HIGHER_IS_BETTER = {"throughput": True, "latency": False}
EFFICIENCY = "efficiency"  # the nested key: {warning, critical}
# ok at 0.8 of the path and more: the limit model's AT_BOUND, where a cell sits at its path (network-capacity)
EFFICIENCY_DEFAULTS: dict[str, float] = {"warning": 0.8, "critical": 0.5}
STATES = ("ok", "warning", "critical", "failed", "none", "maintenance")  # maintenance: results.maintenance


def _number(value: Any) -> bool:
    # JSON numbers only: bool is an int in Python, and a string that looks like a number is still a string.
    return type(value) in (int, float) and math.isfinite(value)


def unknown(raw: Mapping[str, Any]) -> list[str]:
    """Keys this dashboard does not know: ignored (a newer operator may send more; the CRD refuses typos)."""
    return [str(k) for k in raw if k not in KEYS and k != EFFICIENCY]


def _bounds(raw: Mapping[str, Any], kind: str) -> tuple[float, float]:
    good, warn = (k for k, (kd, _) in KEYS.items() if kd == kind)
    return (raw.get(good, DEFAULTS[kind]["ok"]), raw.get(warn, DEFAULTS[kind]["warning"]))


def errors(raw: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with a thresholds object, by key; empty when it is valid. The same rules as the CRD and the
    operator: numbers, not negative, and with the defaults filled in, goodGbps >= warnGbps and
    goodRttMs <= warnRttMs."""
    out: dict[str, str] = {}
    for key in KEYS:
        if key not in raw:
            continue
        value = raw[key]
        if not _number(value):
            out[key] = f"must be a number, not {type(value).__name__} {str(value)[:40]!r}"
        elif value < 0:
            out[key] = f"must not be negative ({value})"
    if EFFICIENCY in raw:
        out.update(efficiency_errors(raw[EFFICIENCY]))
    if out:
        return out
    good, warn = _bounds(raw, "throughput")
    if good < warn:
        key = "goodGbps" if "goodGbps" in raw else "warnGbps"
        out[key] = (f"goodGbps ({good}) is below warnGbps ({warn}) with the defaults filled in; higher throughput "
                    "is better, so goodGbps must be at least warnGbps")
    good, warn = _bounds(raw, "latency")
    if good > warn:
        key = "goodRttMs" if "goodRttMs" in raw else "warnRttMs"
        out[key] = (f"goodRttMs ({good}) is above warnRttMs ({warn}) with the defaults filled in; lower RTT is "
                    "better, so goodRttMs must be at most warnRttMs")
    return out


def efficiency_errors(raw: Any) -> dict[str, str]:
    """What is wrong with thresholds.efficiency, keyed ``efficiency.warning`` etc.: an object of numbers in (0, 1],
    warning above critical with the defaults filled in (the CRD's and the operator's rules); other keys are
    ignored (``known_efficiency`` drops them)."""
    if not isinstance(raw, Mapping):
        return {EFFICIENCY: f"must be an object {{warning, critical}}, not {type(raw).__name__}"}
    out: dict[str, str] = {}
    for key, value in raw.items():
        where = f"{EFFICIENCY}.{key}"
        if key not in EFFICIENCY_DEFAULTS:
            continue  # ignored, as unknown thresholds are (a newer operator may send more; the CRD refuses typos)
        if not _number(value):
            out[where] = f"must be a number, not {type(value).__name__} {str(value)[:40]!r}"
        elif not 0 < value <= 1:
            out[where] = f"must be in (0, 1]: a share of the pair's path capacity, not {value}"
    if out:
        return out
    bounds = {**EFFICIENCY_DEFAULTS, **{k: v for k, v in raw.items() if k in EFFICIENCY_DEFAULTS}}
    if bounds["warning"] <= bounds["critical"]:
        key = "warning" if "warning" in raw else "critical"
        out[f"{EFFICIENCY}.{key}"] = (f"warning ({bounds['warning']}) must be above critical ({bounds['critical']}) "
                                      "with the defaults filled in")
    return out


def known_efficiency(raw: Mapping[str, Any]) -> dict[str, Any]:
    """thresholds.efficiency without the keys this dashboard does not know."""
    return {k: v for k, v in raw.items() if k in EFFICIENCY_DEFAULTS}


def effective_efficiency(raw: Any) -> dict[str, float]:
    """The efficiency bounds {warning, critical}: the given ones over the defaults; never raises (anything not
    valid, as in ``effective``, gives the defaults)."""
    given = raw.get(EFFICIENCY) if isinstance(raw, Mapping) else None
    if isinstance(given, Mapping) and not efficiency_errors(given):
        return {k: float(given.get(k, v)) for k, v in EFFICIENCY_DEFAULTS.items()}
    return dict(EFFICIENCY_DEFAULTS)


def classify_efficiency(efficiency: float | None, status: str | None, bounds: Mapping[str, float]) -> str:
    """A throughput cell's state by its efficiency: ok / warning / critical, failed (not succeeded), none (no
    efficiency: not diagnosed, or no path figure)."""
    if status and status != "succeeded":
        return "failed"
    if efficiency is None:
        return "none"
    return "ok" if efficiency >= bounds["warning"] else "warning" if efficiency >= bounds["critical"] else "critical"


def effective(raw: Any) -> dict[str, dict[str, float]]:
    """The bounds per kind ({"throughput": {"ok", "warning"}, "latency": {...}}): the given numbers over the
    defaults. Never raises: a stored value that is not valid (an older or hand-edited row) counts as not given,
    and a kind whose bounds end up crossed falls back to its defaults."""
    out = {kind: dict(levels) for kind, levels in DEFAULTS.items()}
    if isinstance(raw, Mapping):
        for key, (kind, level) in KEYS.items():
            value = raw.get(key)
            if _number(value) and value >= 0:
                out[kind][level] = float(value)
    for kind, levels in out.items():
        ok, warning = levels["ok"], levels["warning"]
        if (ok < warning) if HIGHER_IS_BETTER[kind] else (ok > warning):
            out[kind] = dict(DEFAULTS[kind])
    return out


def classify(value: float | None, status: str | None, kind: str, bounds: Mapping[str, float]) -> str:
    """A cell's state: ok / warning / critical, failed (not succeeded), none (no value).

    selectors.grid_cells_json computes the same in SQL; tests compare the two.
    """
    if status and status != "succeeded":
        return "failed"
    if value is None:
        return "none"
    if HIGHER_IS_BETTER[kind]:
        return "ok" if value >= bounds["ok"] else "warning" if value >= bounds["warning"] else "critical"
    return "ok" if value <= bounds["ok"] else "warning" if value <= bounds["warning"] else "critical"
