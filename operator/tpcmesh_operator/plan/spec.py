"""TransferBenchmark spec: parse and validate the (camelCase) Kubernetes spec into frozen dataclasses.

Pure code. Every error is a `SpecError` naming the field (`spec.fileSet.size: ...`), so the operator can put it in
a condition and an Event, and the local mode can print it. `to_dict` gives the canonical camelCase form that is
frozen into a TransferRun and parses back to an equal object.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..external.endpoints import ExternalEndpoint, parse_external_endpoints
from ..protocols import PROTOCOLS, TPC_PROTOCOLS
from . import lossprobe
from .lossprobe import LossProbe, parse_loss_probe
from .schedule import parse_schedule
from .specerror import SpecError

DATASETS = ("small", "medium", "large")
PAIR_MODES = ("fullMesh", "explicit", "groups")
ROUND_POLICIES = ("nodeExclusive", "siteExclusive", "serial")
# How HTTP-TPC pulls (xrootd-https, builtin) are authorized: bearer tokens from the operator's issuer, or the host
# certificates alone (the source's public instance reads anonymously). "" = the operator's default.
AUTH_MODES = ("token", "x509")
DEFAULT_SITE_LABEL = "topology.kubernetes.io/zone"
DIRECTIONS = ("both", "aToB", "bToA")
CONCURRENCY_POLICIES = ("Forbid", "Replace")
DESTINATIONS = ("store", "sink")
LOOPBACK_PROTOCOLS = ("iperf3", "builtin")

DEFAULT_SCHEDULE = "@every 12h"
DEFAULT_STREAMS = (8, 1)
DEFAULT_CONCURRENCY = 11
DEFAULT_FILE_COUNT = 11
DEFAULT_FILE_SIZE = 1_000_000_000
DEFAULT_PROTOCOLS = ("xrootd-https", "gridftp")
DEFAULT_TIMEOUT_SECONDS = 1800
DEFAULT_RETRIES = 1
MAX_REPEATS = 20  # spec.repeats: each setting measured this many times in one run (the grid shows their median)
DEFAULT_LATENCY_COUNT = 5
DEFAULT_IPERF3_SECONDS = 10  # iperf3's own default -t
MAX_IPERF3_SECONDS = 300
# The grid's colours (the dashboard reads exactly these keys from the ingest batch's benchmark.thresholds).
DEFAULT_THRESHOLDS: Mapping[str, float] = {"goodGbps": 30, "warnGbps": 10, "goodRttMs": 20, "warnRttMs": 80}
# thresholds.efficiency (passed on only when given): shares of the pair's path capacity, warning above critical
DEFAULT_EFFICIENCY: Mapping[str, float] = {"warning": 0.8, "critical": 0.5}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKMGT]i?B?|B)?\s*$")
_UNITS = {
    None: 1, "B": 1,
    "k": 10**3, "kB": 10**3, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9,
    "T": 10**12, "TB": 10**12,
    "Ki": 2**10, "KiB": 2**10, "kiB": 2**10, "Mi": 2**20, "MiB": 2**20, "Gi": 2**30, "GiB": 2**30,
    "Ti": 2**40, "TiB": 2**40,
}


def parse_size(value: Any, field: str = "size") -> int:
    """'1GB' -> 10**9, '1GiB' -> 2**30, '64MB', '500kB', 1234 (bytes)."""
    if isinstance(value, bool):
        raise SpecError(field, f"expected a size like '1GB' or '1GiB', got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m or m.group(2) not in _UNITS:
            raise SpecError(field, f"expected a size like '1GB', '64MiB' or a byte count, got {value!r}")
        n = int(float(m.group(1)) * _UNITS[m.group(2)])
    else:
        raise SpecError(field, f"expected a size like '1GB' or '1GiB', got {value!r}")
    if n <= 0:
        raise SpecError(field, f"must be positive, got {value!r}")
    return n


def format_size(n: int) -> str:
    for unit, mult in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    for unit, mult in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


@dataclass(frozen=True)
class FileSet:
    count: int | None = DEFAULT_FILE_COUNT
    size: int | None = DEFAULT_FILE_SIZE
    dataset: str | None = None

    @property
    def name(self) -> str:
        """The agents' set name: `<count>x<size>` or the dataset name."""
        return self.dataset if self.dataset else f"{self.count}x{self.size}"

    def request(self) -> dict[str, Any]:
        """Body of POST /api/v1/filesets and the `file_set` of POST /api/v1/transfers."""
        return {"dataset": self.dataset} if self.dataset else {"count": self.count, "size": self.size}


@dataclass(frozen=True)
class Optimize:
    """spec.optimizeBounds: where `optimize: true` may take a link (the dashboard's advice API's bounds)."""

    streams_max: int = 16
    concurrency_max: int = 16
    concurrency_step: int = 1
    connections_max: int = 1024  # streams x files at once; the agents' default limit (max_streams_x_concurrency)

    def query(self) -> dict[str, int]:
        """The advice API's parameters for these bounds."""
        return {"streams_max": self.streams_max, "concurrency_max": self.concurrency_max,
                "concurrency_step": self.concurrency_step, "connections_max": self.connections_max}


@dataclass(frozen=True)
class Pairs:
    mode: str = "fullMesh"
    explicit: tuple[tuple[str, str], ...] = ()
    group_a: Mapping[str, str] = field(default_factory=dict)
    group_b: Mapping[str, str] = field(default_factory=dict)
    direction: str = "both"


@dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str = "token"


@dataclass(frozen=True)
class Results:
    url: str
    token_secret: SecretKeyRef | None = None


@dataclass(frozen=True)
class Loopback:
    """Each agent measured against itself (the grid's diagonal): iperf3 is cheap (spec.iperf3.durationSeconds),
    builtin moves the files."""

    enabled: bool = True
    protocol: str = "iperf3"


@dataclass(frozen=True)
class BenchmarkSpec:
    schedule: str = DEFAULT_SCHEDULE
    suspend: bool = False
    agent_selector: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    pairs: Pairs = field(default_factory=Pairs)
    protocols: tuple[str, ...] = DEFAULT_PROTOCOLS
    latency: bool = True
    latency_count: int = DEFAULT_LATENCY_COUNT
    path: bool = True  # spec.latency.path: a tracepath from the source with each pair's RTT probe
    loopback: Loopback = field(default_factory=Loopback)
    iperf3_seconds: int = DEFAULT_IPERF3_SECONDS  # how long each iperf3 test (and an iperf3 loopback) sends
    streams: tuple[int, ...] = DEFAULT_STREAMS
    congestion_control: tuple[str, ...] = ()  # spec.tcp.congestionControl; empty: the nodes' default
    address_families: tuple[str, ...] = ("ipv4",)  # spec.addressFamilies: each a setting of its own (plan/planner.py)
    concurrency: int = DEFAULT_CONCURRENCY
    file_set: FileSet = field(default_factory=FileSet)
    destination: str = "store"
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    retries: int = DEFAULT_RETRIES
    repeats: int = 1  # each transfer setting measured this many times per run (the RTT probe once)
    # spec.optimize: each link's streams x files for the file movers come from the dashboard's advice (None: off)
    optimize: Optimize | None = None
    thresholds: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    results: Results | None = None
    concurrency_policy: str = "Forbid"
    round_policy: str = "nodeExclusive"  # what may not share a round: plan/planner.py
    site_label: str = DEFAULT_SITE_LABEL
    auth: str = ""  # AUTH_MODES, or "" for the operator's default (token when it runs an issuer)
    external_endpoints: tuple[ExternalEndpoint, ...] = ()  # storage outside the mesh: external/endpoints.py
    loss_probe: LossProbe = field(default_factory=LossProbe)  # the always-on TWAMP-light mesh: plan/lossprobe.py
    successful_runs_history_limit: int = 3
    failed_runs_history_limit: int = 1


def _get(d: Mapping[str, Any], key: str, path: str, types: type | tuple[type, ...], default: Any) -> Any:
    if key not in d or d[key] is None:
        return default
    v = d[key]
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise SpecError(f"{path}.{key}", f"expected {_tname(types)}, got {v!r}")
    if not isinstance(v, types):
        raise SpecError(f"{path}.{key}", f"expected {_tname(types)}, got {v!r}")
    return v


def _tname(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
             bool: "a boolean"}
    return " or ".join(names.get(t, t.__name__) for t in ts)


def _int(d: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int) -> int:
    v = _get(d, key, path, int, default)
    if not lo <= v <= hi:
        raise SpecError(f"{path}.{key}", f"must be between {lo} and {hi}, got {v}")
    return int(v)


def _labels(v: Any, path: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise SpecError(path, f"expected an object, got {v!r}")
    labels = v.get("matchLabels", v) if "matchLabels" in v or not v else v
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(x, str) for k, x in labels.items()):
        raise SpecError(path, "expected matchLabels: a map of label names to string values")
    return dict(labels)


def _efficiency(d: Mapping[str, Any], path: str) -> dict[str, float]:
    """{warning, critical}: numbers in (0, 1] (defaults for the missing ones), warning above critical; the CRD
    checks the same."""
    _only_known(d, path, DEFAULT_EFFICIENCY)
    out: dict[str, float] = {}
    for key, default in DEFAULT_EFFICIENCY.items():
        v = _get(d, key, path, (int, float), default)
        if not 0 < v <= 1:
            raise SpecError(f"{path}.{key}", f"must be above 0 and at most 1 (a share of the pair's path "
                                             f"capacity), got {v}")
        out[key] = v
    if out["warning"] <= out["critical"]:
        key = "warning" if "warning" in d else "critical"
        raise SpecError(f"{path}.{key}", f"{path}.warning must be above {path}.critical ({out['warning']} <= "
                                         f"{out['critical']})")
    return out


def _thresholds(d: Mapping[str, Any], path: str) -> dict[str, Any]:
    """{goodGbps, warnGbps, goodRttMs, warnRttMs}: numbers >= 0 (defaults for the missing ones), good >= warn for
    throughput and good <= warn for RTT; efficiency: {warning, critical} when given (_efficiency). The CRD checks
    the same."""
    known = (*DEFAULT_THRESHOLDS, "efficiency")
    _only_known(d, path, known)
    out: dict[str, Any] = {}
    for key, default in DEFAULT_THRESHOLDS.items():
        v = _get(d, key, path, (int, float), default)
        if v < 0:
            raise SpecError(f"{path}.{key}", f"must be 0 or more, got {v}")
        out[key] = v
    if out["goodGbps"] < out["warnGbps"]:
        raise SpecError(f"{path}.goodGbps", f"must be at least {path}.warnGbps ({out['goodGbps']} < "
                                            f"{out['warnGbps']})")
    if out["goodRttMs"] > out["warnRttMs"]:
        raise SpecError(f"{path}.goodRttMs", f"must be at most {path}.warnRttMs ({out['goodRttMs']} > "
                                             f"{out['warnRttMs']})")
    if d.get("efficiency") is not None:
        out["efficiency"] = _efficiency(_get(d, "efficiency", path, dict, {}), f"{path}.efficiency")
    return out


def parse_spec(spec: Mapping[str, Any] | None, path: str = "spec") -> BenchmarkSpec:
    """Validate a TransferBenchmark spec (as stored in Kubernetes or read from YAML). Each distinct spec is parsed
    once (the result is frozen): a timer tick, its status and its run ask for the same spec several times."""
    try:
        key = json.dumps(spec, sort_keys=True, default=dict)  # kopf hands its own Mapping views
    except (TypeError, ValueError):  # not JSON (a non-string key): parse it as it is, to name what is wrong
        return _parse_spec(spec, path)
    return _parse_spec_once(key, path)


@functools.lru_cache(maxsize=256)
def _parse_spec_once(key: str, path: str) -> BenchmarkSpec:
    return _parse_spec(json.loads(key), path)


SPEC_FIELDS = tuple(sorted((
    "schedule", "suspend", "agentSelector", "nodeSelector", "pairs", "protocols", "latency", "loopback", "iperf3",
    "streams", "tcp", "concurrency", "fileSet", "destination", "timeoutSeconds", "retries", "repeats", "thresholds",
    "results", "concurrencyPolicy", "successfulRunsHistoryLimit", "failedRunsHistoryLimit", "roundPolicy",
    "siteLabel", "auth", "externalEndpoints", "addressFamilies", "optimize", "optimizeBounds", "lossProbe",
)))


def _parse_spec(spec: Mapping[str, Any] | None, path: str) -> BenchmarkSpec:
    """The whole spec, one part at a time (each helper below parses one field and names it in its errors)."""
    d: Mapping[str, Any] = spec or {}
    if not isinstance(d, Mapping):
        raise SpecError(path, f"expected an object, got {d!r}")
    _only_known(d, path, SPEC_FIELDS)
    # in the order of the fields' errors: a spec with several faults is told the first of them
    schedule = _schedule(d, path)
    protocols = _protocols(d, path)
    latency, latency_count, trace = _latency(d.get("latency", True), f"{path}.latency")
    if not protocols and not latency:
        raise SpecError(f"{path}.protocols", "nothing to measure: no protocol and latency off")
    loopback = _loopback(_get(d, "loopback", path, dict, {}), f"{path}.loopback")
    iperf3 = _get(d, "iperf3", path, dict, {})
    _only_known(iperf3, f"{path}.iperf3", ("durationSeconds",))
    iperf3_seconds = _int(iperf3, "durationSeconds", f"{path}.iperf3", DEFAULT_IPERF3_SECONDS, 1, MAX_IPERF3_SECONDS)
    streams = _streams(d, path)
    file_set = _file_set(_get(d, "fileSet", path, dict, {}), f"{path}.fileSet")
    pairs = _pairs(_get(d, "pairs", path, dict, {}), f"{path}.pairs")
    results = _results(d.get("results"), f"{path}.results")
    destination = _one_of(d, "destination", path, DESTINATIONS, "store")
    policy = _one_of(d, "concurrencyPolicy", path, CONCURRENCY_POLICIES, "Forbid")
    round_policy = _one_of(d, "roundPolicy", path, ROUND_POLICIES, "nodeExclusive")
    thresholds = _thresholds(_get(d, "thresholds", path, dict, {}), f"{path}.thresholds")
    auth = _get(d, "auth", path, str, "")
    if auth and auth not in AUTH_MODES:
        raise SpecError(f"{path}.auth", f"must be one of {', '.join(AUTH_MODES)} (or left out for the operator's "
                                        f"default), got {auth!r}")
    timeout_seconds = _int(d, "timeoutSeconds", path, DEFAULT_TIMEOUT_SECONDS, 1, 86400)
    uses_iperf3 = "iperf3" in protocols or (loopback.enabled and loopback.protocol == "iperf3")
    if uses_iperf3 and iperf3_seconds >= timeout_seconds:
        raise SpecError(f"{path}.iperf3.durationSeconds",
                        f"{iperf3_seconds} s must be shorter than {path}.timeoutSeconds ({timeout_seconds} s)")

    return BenchmarkSpec(
        schedule=schedule,
        suspend=_get(d, "suspend", path, bool, False),
        agent_selector=_labels(d.get("agentSelector"), f"{path}.agentSelector"),
        node_selector=_labels(d.get("nodeSelector"), f"{path}.nodeSelector"),
        pairs=pairs,
        protocols=tuple(protocols),
        latency=latency,
        latency_count=latency_count,
        path=trace,
        loopback=loopback,
        iperf3_seconds=iperf3_seconds,
        streams=streams,
        congestion_control=_congestion_control(d.get("tcp"), f"{path}.tcp"),
        address_families=_address_families(d.get("addressFamilies"), f"{path}.addressFamilies"),
        concurrency=_int(d, "concurrency", path, DEFAULT_CONCURRENCY, 1, 1000),
        file_set=file_set,
        destination=destination,
        timeout_seconds=timeout_seconds,
        retries=_int(d, "retries", path, DEFAULT_RETRIES, 0, 10),
        repeats=_int(d, "repeats", path, 1, 1, MAX_REPEATS),
        optimize=_optimize(d, path, protocols, file_set),
        thresholds=thresholds,
        results=results,
        concurrency_policy=policy,
        round_policy=round_policy,
        site_label=_get(d, "siteLabel", path, str, DEFAULT_SITE_LABEL) or DEFAULT_SITE_LABEL,
        auth=auth,
        external_endpoints=parse_external_endpoints(d.get("externalEndpoints"), f"{path}.externalEndpoints",
                                                    tuple(protocols)),
        loss_probe=parse_loss_probe(d.get("lossProbe"), f"{path}.lossProbe"),
        successful_runs_history_limit=_int(d, "successfulRunsHistoryLimit", path, 3, 0, 100),
        failed_runs_history_limit=_int(d, "failedRunsHistoryLimit", path, 1, 0, 100),
    )


def _only_known(d: Mapping[str, Any], path: str, known: Collection[str]) -> None:
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(known)})")


def _one_of(d: Mapping[str, Any], key: str, path: str, choices: tuple[str, ...], default: str) -> str:
    value = _get(d, key, path, str, default)
    if value not in choices:
        raise SpecError(f"{path}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _schedule(d: Mapping[str, Any], path: str) -> str:
    schedule = str(_get(d, "schedule", path, str, DEFAULT_SCHEDULE)).strip()
    try:
        parse_schedule(schedule)
    except ValueError as e:
        raise SpecError(f"{path}.schedule", str(e)) from None
    return schedule


def _protocols(d: Mapping[str, Any], path: str) -> list[str]:
    protocols = _get(d, "protocols", path, list, list(DEFAULT_PROTOCOLS))
    for i, p in enumerate(protocols):
        if p not in PROTOCOLS:
            raise SpecError(f"{path}.protocols[{i}]", f"unknown protocol {p!r} (one of {', '.join(PROTOCOLS)})")
    if len(set(protocols)) != len(protocols):
        raise SpecError(f"{path}.protocols", "must not repeat a protocol")
    return list(protocols)


def _latency(lat: Any, path: str) -> tuple[bool, int, bool]:
    """spec.latency: a boolean, or {enabled, count, path} -> (enabled, probes per pair, trace the path)."""
    if isinstance(lat, bool):
        return lat, DEFAULT_LATENCY_COUNT, True
    if isinstance(lat, Mapping):
        return (_get(lat, "enabled", path, bool, True), _int(lat, "count", path, DEFAULT_LATENCY_COUNT, 1, 100),
                _get(lat, "path", path, bool, True))
    raise SpecError(path, f"expected a boolean or {{enabled, count, path}}, got {lat!r}")


def _loopback(lb: Mapping[str, Any], path: str) -> Loopback:
    _only_known(lb, path, ("enabled", "protocol"))
    enabled = _get(lb, "enabled", path, bool, True)
    return Loopback(enabled, _one_of(lb, "protocol", path, LOOPBACK_PROTOCOLS, "iperf3"))


def _streams(d: Mapping[str, Any], path: str) -> tuple[int, ...]:
    streams = _get(d, "streams", path, list, list(DEFAULT_STREAMS))
    if not streams:
        raise SpecError(f"{path}.streams", "must list at least one stream count")
    for i, s in enumerate(streams):
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 100:
            raise SpecError(f"{path}.streams[{i}]", f"must be an integer between 1 and 100, got {s!r}")
    if len(set(streams)) != len(streams):
        raise SpecError(f"{path}.streams", "must not repeat a stream count")
    return tuple(streams)


def _file_set(fs: Mapping[str, Any], path: str) -> FileSet:
    if "dataset" in fs and fs["dataset"] is not None:
        if "count" in fs or "size" in fs:
            raise SpecError(path, "give either dataset or count and size, not both")
        if fs["dataset"] not in DATASETS:
            raise SpecError(f"{path}.dataset", f"unknown dataset {fs['dataset']!r} (one of {', '.join(DATASETS)})")
        return FileSet(count=None, size=None, dataset=fs["dataset"])
    _only_known(fs, path, ("count", "size", "dataset"))
    count = _int(fs, "count", path, DEFAULT_FILE_COUNT, 1, 10000)
    return FileSet(count=count, size=parse_size(fs.get("size", DEFAULT_FILE_SIZE), f"{path}.size"))


def _pairs(pd: Mapping[str, Any], path: str) -> Pairs:
    mode = _one_of(pd, "mode", path, PAIR_MODES, "fullMesh")
    direction = _one_of(pd, "direction", path, DIRECTIONS, "both")
    explicit: list[tuple[str, str]] = []
    group_a: dict[str, str] = {}
    group_b: dict[str, str] = {}
    if mode == "explicit":
        items = _get(pd, "explicit", path, list, [])
        if not items:
            raise SpecError(f"{path}.explicit", "mode explicit needs at least one {source, destination} pair")
        for i, it in enumerate(items):
            ip = f"{path}.explicit[{i}]"
            if not isinstance(it, Mapping) or not isinstance(it.get("source"), str) or not isinstance(
                it.get("destination"), str
            ):
                raise SpecError(ip, "expected {source: <node>, destination: <node>}")
            if it["source"] == it["destination"]:
                raise SpecError(ip, f"source and destination are the same node {it['source']!r}")
            pair = (it["source"], it["destination"])
            if pair in explicit:
                raise SpecError(ip, f"pair {pair[0]} -> {pair[1]} listed twice")
            explicit.append(pair)
    elif mode == "groups":
        group_a = _labels(pd.get("groupA"), f"{path}.groupA")
        group_b = _labels(pd.get("groupB"), f"{path}.groupB")
        if not group_a or not group_b:
            raise SpecError(f"{path}.groupA" if not group_a else f"{path}.groupB",
                            "mode groups needs groupA and groupB label selectors")
    return Pairs(mode=mode, explicit=tuple(explicit), group_a=group_a, group_b=group_b, direction=direction)


def _results(res: Any, path: str) -> Results | None:
    if res is None:
        return None
    if not isinstance(res, Mapping):
        raise SpecError(path, "expected {url, tokenSecret: {name, key}}")
    url = _get(res, "url", path, str, "")
    if not re.match(r"^https?://[^\s/]+", url):
        raise SpecError(f"{path}.url", f"expected an http(s) URL, got {url!r}")
    ts = res.get("tokenSecret")
    token_secret = None
    if ts is not None:
        if not isinstance(ts, Mapping) or not isinstance(ts.get("name"), str) or not ts["name"]:
            raise SpecError(f"{path}.tokenSecret", "expected {name: <secret>, key: <key>}")
        token_secret = SecretKeyRef(ts["name"], _get(ts, "key", f"{path}.tokenSecret", str, "token"))
    return Results(url=url.rstrip("/"), token_secret=token_secret)


ADDRESS_FAMILIES = ("ipv4", "ipv6")
OPTIMIZE_BOUNDS = {"streamsMax": (1, 100), "concurrencyMax": (1, 1000), "concurrencyStep": (1, 1000),
                   "connectionsMax": (1, 100_000)}


def _optimize(d: Mapping[str, Any], path: str, protocols: list[str], file_set: FileSet) -> Optimize | None:
    """spec.optimize (boolean) and spec.optimizeBounds {streamsMax, concurrencyMax, concurrencyStep,
    connectionsMax}. Files at once default to (and may not exceed) the file set's count, capped at 16."""
    on = _get(d, "optimize", path, bool, False)
    bounds = _get(d, "optimizeBounds", path, dict, None)
    bpath = f"{path}.optimizeBounds"
    if not on:
        if bounds is not None:
            raise SpecError(bpath, f"bounds without {path}.optimize: true (set it, or remove the bounds)")
        return None
    if not any(p in TPC_PROTOCOLS for p in protocols):
        raise SpecError(f"{path}.optimize", f"tunes the file movers' streams and files ({', '.join(TPC_PROTOCOLS)}): "
                                            f"{path}.protocols has none of them")
    bounds = bounds or {}
    _only_known(bounds, bpath, OPTIMIZE_BOUNDS)
    count = file_set.count
    default_files = min(16, count) if count else 16
    lo_hi = OPTIMIZE_BOUNDS
    out = Optimize(
        streams_max=_int(bounds, "streamsMax", bpath, 16, *lo_hi["streamsMax"]),
        concurrency_max=_int(bounds, "concurrencyMax", bpath, default_files, *lo_hi["concurrencyMax"]),
        concurrency_step=_int(bounds, "concurrencyStep", bpath, 1, *lo_hi["concurrencyStep"]),
        connections_max=_int(bounds, "connectionsMax", bpath, 1024, *lo_hi["connectionsMax"]),
    )
    if count and out.concurrency_max > count:
        raise SpecError(f"{bpath}.concurrencyMax", f"{out.concurrency_max} files at once, but the file set has "
                                                   f"{count} files ({path}.fileSet.count)")
    return out


def _address_families(d: Any, path: str) -> tuple[str, ...]:
    """spec.addressFamilies: ipv4 and/or ipv6, default [ipv4] (a cluster gaining IPv6 does not double a run's
    length unasked; dual-stack testing is one line in the spec)."""
    if d is None:
        return ("ipv4",)
    if not isinstance(d, list) or not d:
        raise SpecError(path, f"expected a non-empty list of {' and/or '.join(ADDRESS_FAMILIES)}, got {d!r}")
    for i, f in enumerate(d):
        if f not in ADDRESS_FAMILIES:
            raise SpecError(f"{path}[{i}]", f"must be one of {', '.join(ADDRESS_FAMILIES)}, got {f!r}")
    if len(set(d)) != len(d):
        raise SpecError(path, "must not repeat a family")
    return tuple(d)


CONGESTION_NAME = re.compile(r"^[a-z0-9_]{1,15}$")


def _congestion_control(d: Any, path: str) -> tuple[str, ...]:
    """spec.tcp.congestionControl: distinct algorithm names (whether a node has them, its agent says)."""
    if d is None:
        return ()
    if not isinstance(d, Mapping):
        raise SpecError(path, f"expected an object {{congestionControl: [...]}}, got {d!r}")
    _only_known(d, path, ("congestionControl",))
    names = _get(d, "congestionControl", path, list, [])
    for i, n in enumerate(names):
        if not isinstance(n, str) or not CONGESTION_NAME.match(n):
            raise SpecError(f"{path}.congestionControl[{i}]", f"must be an algorithm name such as cubic or bbr, "
                                                              f"got {n!r}")
    if len(set(names)) != len(names):
        raise SpecError(f"{path}.congestionControl", "must not repeat an algorithm")
    if len(names) > 8:
        raise SpecError(f"{path}.congestionControl", f"at most 8 algorithms, got {len(names)}")
    return tuple(names)


def to_dict(s: BenchmarkSpec) -> dict[str, Any]:
    """The canonical camelCase spec (what a TransferRun freezes); parse_spec(to_dict(s)) == s."""
    out: dict[str, Any] = {
        "schedule": s.schedule,
        "suspend": s.suspend,
        "pairs": {"mode": s.pairs.mode, "direction": s.pairs.direction},
        "protocols": list(s.protocols),
        "latency": {"enabled": s.latency, "count": s.latency_count, "path": s.path},
        "loopback": {"enabled": s.loopback.enabled, "protocol": s.loopback.protocol},
        "iperf3": {"durationSeconds": s.iperf3_seconds},
        "streams": list(s.streams),
        "concurrency": s.concurrency,
        "fileSet": {"dataset": s.file_set.dataset} if s.file_set.dataset
        else {"count": s.file_set.count, "size": format_size(s.file_set.size or 0)},
        "destination": s.destination,
        "timeoutSeconds": s.timeout_seconds,
        "retries": s.retries,
        **({"repeats": s.repeats} if s.repeats != 1 else {}),
        "thresholds": dict(s.thresholds),
        "concurrencyPolicy": s.concurrency_policy,
        "roundPolicy": s.round_policy,
        "siteLabel": s.site_label,
        **({"auth": s.auth} if s.auth else {}),
        "successfulRunsHistoryLimit": s.successful_runs_history_limit,
        "failedRunsHistoryLimit": s.failed_runs_history_limit,
    }
    if s.external_endpoints:
        out["externalEndpoints"] = [e.to_dict() for e in s.external_endpoints]
    if s.loss_probe != LossProbe():
        out["lossProbe"] = lossprobe.to_dict(s.loss_probe)
    if s.optimize is not None:
        o = s.optimize
        out["optimize"] = True
        out["optimizeBounds"] = {"streamsMax": o.streams_max, "concurrencyMax": o.concurrency_max,
                                 "concurrencyStep": o.concurrency_step, "connectionsMax": o.connections_max}
    if s.congestion_control:
        out["tcp"] = {"congestionControl": list(s.congestion_control)}
    if s.address_families != ("ipv4",):
        out["addressFamilies"] = list(s.address_families)
    if s.agent_selector:
        out["agentSelector"] = {"matchLabels": dict(s.agent_selector)}
    if s.node_selector:
        out["nodeSelector"] = {"matchLabels": dict(s.node_selector)}
    if s.pairs.mode == "explicit":
        out["pairs"]["explicit"] = [{"source": a, "destination": b} for a, b in s.pairs.explicit]
    if s.pairs.mode == "groups":
        out["pairs"]["groupA"] = {"matchLabels": dict(s.pairs.group_a)}
        out["pairs"]["groupB"] = {"matchLabels": dict(s.pairs.group_b)}
    if s.results:
        out["results"] = {"url": s.results.url}
        if s.results.token_secret:
            out["results"]["tokenSecret"] = {"name": s.results.token_secret.name, "key": s.results.token_secret.key}
    return out


def load_manifest(doc: Mapping[str, Any]) -> tuple[str, BenchmarkSpec]:
    """A TransferBenchmark (or TransferRun with an inline `benchmark` spec) manifest -> (name, spec)."""
    kind = doc.get("kind")
    name = (doc.get("metadata") or {}).get("name") or "benchmark"
    if kind == "TransferBenchmark":
        return name, parse_spec(doc.get("spec"))
    if kind == "TransferRun":
        spec = (doc.get("spec") or {}).get("benchmark")
        if spec is None:
            raise SpecError("spec.benchmark", "a TransferRun run outside a cluster needs an inline benchmark spec")
        return name, parse_spec(spec, "spec.benchmark")
    raise SpecError("kind", f"expected TransferBenchmark or TransferRun, got {kind!r}")

