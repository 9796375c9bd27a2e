"""Spec parsing: defaults, sizes, round trip, and errors that name the field."""

from __future__ import annotations

import pytest
import yaml
from tpcmesh_operator.plan.spec import SpecError, load_manifest, parse_size, parse_spec, to_dict

from tests.support.paths import REPO


def test_defaults_are_the_papers() -> None:
    s = parse_spec({})
    assert s.schedule == "@every 12h"
    assert s.streams == (8, 1)
    assert s.concurrency == 11
    assert (s.file_set.count, s.file_set.size) == (11, 10**9)
    assert s.file_set.name == "11x1000000000"
    assert s.latency is True
    assert s.pairs.mode == "fullMesh"
    assert s.thresholds == {"goodGbps": 30, "warnGbps": 10, "goodRttMs": 20, "warnRttMs": 80}
    assert (s.loopback.enabled, s.loopback.protocol) == (True, "iperf3")
    assert s.iperf3_seconds == 10


@pytest.mark.parametrize("text,value", [
    ("1GB", 10**9), ("1GiB", 2**30), ("64MB", 64 * 10**6), ("64MiB", 64 * 2**20), ("500kB", 500_000),
    ("1.5GB", 1_500_000_000), (1234, 1234), ("2048", 2048),
])
def test_sizes(text, value) -> None:
    assert parse_size(text) == value


def test_round_trip() -> None:
    raw = {"schedule": "0 */6 * * *", "protocols": ["builtin", "iperf3"], "streams": [4],
           "fileSet": {"count": 4, "size": "64MiB"}, "latency": {"enabled": True, "count": 3, "path": False},
           "loopback": {"enabled": True, "protocol": "builtin"},
           "iperf3": {"durationSeconds": 3}, "tcp": {"congestionControl": ["cubic", "bbr"]},
           "pairs": {"mode": "explicit", "explicit": [{"source": "a", "destination": "b"}]},
           "results": {"url": "http://dash:8000/", "tokenSecret": {"name": "tok"}}, "agentSelector": {
               "matchLabels": {"app": "agent"}}}
    s = parse_spec(raw)
    assert parse_spec(to_dict(s)) == s
    assert s.results.url == "http://dash:8000" and s.congestion_control == ("cubic", "bbr")
    assert s.path is False and parse_spec({}).path is True
    assert "tcp" not in to_dict(parse_spec({}))  # unset: the nodes' default, and a frozen spec says nothing
    assert parse_spec({}).repeats == 1 and "repeats" not in to_dict(parse_spec({}))
    assert parse_spec(to_dict(parse_spec({"repeats": 5}))).repeats == 5


def test_optimize_bounds_default_to_the_file_set_and_round_trip() -> None:
    assert parse_spec({}).optimize is None and "optimize" not in to_dict(parse_spec({}))
    o = parse_spec({"optimize": True}).optimize  # the paper's 11 files: at most 11 at once
    assert (o.streams_max, o.concurrency_max, o.concurrency_step, o.connections_max) == (16, 11, 1, 1024)
    assert parse_spec({"optimize": True, "fileSet": {"dataset": "small"}}).optimize.concurrency_max == 16
    s = parse_spec({"optimize": True, "fileSet": {"count": 64, "size": "1MB"},
                    "optimizeBounds": {"streamsMax": 32, "concurrencyStep": 4, "connectionsMax": 256}})
    assert s.optimize.query() == {"streams_max": 32, "concurrency_max": 16, "concurrency_step": 4,
                                  "connections_max": 256}
    assert parse_spec(to_dict(s)) == s


@pytest.mark.parametrize("raw,field", [
    ({"schedule": "every day"}, "spec.schedule"),
    ({"protocols": ["ftp"]}, "spec.protocols[0]"),
    ({"protocols": ["gridftp", "gridftp"]}, "spec.protocols"),
    ({"streams": [0]}, "spec.streams[0]"),
    ({"streams": []}, "spec.streams"),
    ({"concurrency": 0}, "spec.concurrency"),
    ({"concurrency": "11"}, "spec.concurrency"),
    ({"fileSet": {"count": 2, "size": "1 parsec"}}, "spec.fileSet.size"),
    ({"fileSet": {"dataset": "huge"}}, "spec.fileSet.dataset"),
    ({"fileSet": {"dataset": "small", "count": 2}}, "spec.fileSet"),
    ({"pairs": {"mode": "ring"}}, "spec.pairs.mode"),
    ({"pairs": {"mode": "explicit"}}, "spec.pairs.explicit"),
    ({"pairs": {"mode": "explicit", "explicit": [{"source": "a", "destination": "a"}]}}, "spec.pairs.explicit[0]"),
    ({"pairs": {"mode": "groups", "groupA": {"matchLabels": {"s": "a"}}}}, "spec.pairs.groupB"),
    ({"results": {"url": "dash:8000"}}, "spec.results.url"),
    ({"concurrencyPolicy": "Allow"}, "spec.concurrencyPolicy"),
    ({"timeoutSeconds": -1}, "spec.timeoutSeconds"),
    ({"suspend": "yes"}, "spec.suspend"),
    ({"protocols": [], "latency": False}, "spec.protocols"),
    ({"streamz": [1]}, "spec.streamz"),
    ({"latency": {"path": "yes"}}, "spec.latency.path"),
    ({"thresholds": {"goodGbps": 5, "warnGbps": 10}}, "spec.thresholds.goodGbps"),
    ({"thresholds": {"goodGbps": 5}}, "spec.thresholds.goodGbps"),  # below the default warnGbps
    ({"thresholds": {"goodRttMs": 100, "warnRttMs": 50}}, "spec.thresholds.goodRttMs"),
    ({"thresholds": {"warnGbps": -1}}, "spec.thresholds.warnGbps"),
    ({"thresholds": {"warnRttMs": "fast"}}, "spec.thresholds.warnRttMs"),
    ({"thresholds": {"goodGbps": True}}, "spec.thresholds.goodGbps"),
    ({"thresholds": {"good": 5}}, "spec.thresholds.good"),
    ({"thresholds": {"efficiency": {"warning": 0}}}, "spec.thresholds.efficiency.warning"),
    ({"thresholds": {"efficiency": {"critical": 1.5}}}, "spec.thresholds.efficiency.critical"),
    ({"thresholds": {"efficiency": {"warning": 0.5, "critical": 0.7}}}, "spec.thresholds.efficiency.warning"),
    ({"thresholds": {"efficiency": {"critical": 0.9}}}, "spec.thresholds.efficiency.critical"),  # default warning
    ({"thresholds": {"efficiency": {"warning": "high"}}}, "spec.thresholds.efficiency.warning"),
    ({"thresholds": {"efficiency": {"ok": 0.9}}}, "spec.thresholds.efficiency.ok"),
    ({"thresholds": {"efficiency": 0.8}}, "spec.thresholds.efficiency"),
    ({"loopback": {"protocol": "gridftp"}}, "spec.loopback.protocol"),
    ({"loopback": {"enabled": "yes"}}, "spec.loopback.enabled"),
    ({"loopback": True}, "spec.loopback"),
    ({"loopback": {"streams": 8}}, "spec.loopback.streams"),
    ({"iperf3": {"durationSeconds": 0}}, "spec.iperf3.durationSeconds"),
    ({"iperf3": {"seconds": 3}}, "spec.iperf3.seconds"),
    ({"timeoutSeconds": 10}, "spec.iperf3.durationSeconds"),  # the iperf3 loopback would outlast its timeout
    ({"tcp": {"congestionControl": ["BBR"]}}, "spec.tcp.congestionControl[0]"),
    ({"tcp": {"congestionControl": ["bbr", "bbr"]}}, "spec.tcp.congestionControl"),
    ({"tcp": {"congestionControl": "bbr"}}, "spec.tcp.congestionControl"),
    ({"tcp": {"congestion": ["bbr"]}}, "spec.tcp.congestion"),
    ({"tcp": ["bbr"]}, "spec.tcp"),
    ({"repeats": 0}, "spec.repeats"),
    ({"repeats": 21}, "spec.repeats"),
    ({"repeats": "3"}, "spec.repeats"),
    ({"optimize": "yes"}, "spec.optimize"),
    ({"optimizeBounds": {"streamsMax": 8}}, "spec.optimizeBounds"),  # bounds without optimize: a mistake
    ({"optimize": True, "protocols": ["iperf3"]}, "spec.optimize"),  # nothing it tunes
    ({"optimize": True, "optimizeBounds": {"streamsMax": 0}}, "spec.optimizeBounds.streamsMax"),
    ({"optimize": True, "optimizeBounds": {"streams": 4}}, "spec.optimizeBounds.streams"),
    ({"optimize": True, "fileSet": {"count": 4, "size": "1MB"}, "optimizeBounds": {"concurrencyMax": 8}},
     "spec.optimizeBounds.concurrencyMax"),  # more files at once than the set has
])
def test_errors_name_the_field(raw, field) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(raw)
    assert e.value.field == field
    assert str(e.value).startswith(field + ":")


def test_thresholds_keep_the_numbers_given_and_fill_the_rest() -> None:
    s = parse_spec({"thresholds": {"goodGbps": 12.5, "warnGbps": 0, "warnRttMs": 150}})
    assert s.thresholds == {"goodGbps": 12.5, "warnGbps": 0, "goodRttMs": 20, "warnRttMs": 150}
    assert to_dict(s)["thresholds"] == s.thresholds and parse_spec(to_dict(s)) == s


def test_efficiency_thresholds_are_passed_on_only_when_given_with_the_other_bound_filled_in() -> None:
    s = parse_spec({"thresholds": {"efficiency": {"warning": 0.9}}})
    assert s.thresholds["efficiency"] == {"warning": 0.9, "critical": 0.5}
    assert parse_spec(to_dict(s)) == s and "efficiency" not in parse_spec({}).thresholds


def test_efficiency_errors_say_what_is_wrong() -> None:
    with pytest.raises(SpecError, match=r"spec.thresholds.efficiency.warning must be above "
                                        r"spec.thresholds.efficiency.critical \(0.5 <= 0.7\)"):
        parse_spec({"thresholds": {"efficiency": {"warning": 0.5, "critical": 0.7}}})
    with pytest.raises(SpecError, match=r"must be above 0 and at most 1 .*got 1.5"):
        parse_spec({"thresholds": {"efficiency": {"critical": 1.5}}})


def test_examples_parse() -> None:
    files = sorted((REPO / "manifests" / "examples").glob("*.yaml"))
    assert files, "no examples"
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") in ("TransferBenchmark",) or (doc and doc.get("spec", {}).get("benchmark")):
                load_manifest(doc)
