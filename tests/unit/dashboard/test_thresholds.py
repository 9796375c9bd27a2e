"""Thresholds: the contract's four keys, their validation, the effective bounds (junk-proof), a cell's state."""

import pytest
from results import thresholds


def test_valid_thresholds_have_no_errors():
    assert thresholds.errors({}) == {}
    assert thresholds.errors({"goodGbps": 30, "warnGbps": 10.5, "goodRttMs": 20, "warnRttMs": 80}) == {}
    assert thresholds.errors({"goodGbps": 10, "warnGbps": 10, "goodRttMs": 5, "warnRttMs": 5}) == {}
    assert thresholds.errors({"goodGbps": 0, "warnGbps": 0}) == {}


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"goodGbps": "30"}, "goodGbps", "must be a number, not str"),
        ({"warnGbps": True}, "warnGbps", "must be a number, not bool"),
        ({"goodRttMs": None}, "goodRttMs", "must be a number"),
        ({"warnRttMs": float("nan")}, "warnRttMs", "must be a number"),
        ({"goodGbps": -1}, "goodGbps", "negative"),
        ({"goodGbps": 5, "warnGbps": 10}, "goodGbps", "below warnGbps"),
        ({"goodRttMs": 90, "warnRttMs": 80}, "goodRttMs", "above warnRttMs"),
        # the defaults filled in, as the CRD and the operator do: warnGbps 10, warnRttMs 80
        ({"goodGbps": 5}, "goodGbps", "goodGbps (5) is below warnGbps (10.0) with the defaults filled in"),
        ({"warnGbps": 40}, "warnGbps", "below warnGbps (40)"),
        ({"goodRttMs": 100}, "goodRttMs", "above warnRttMs (80.0)"),
    ],
)
def test_errors_name_the_key(raw, key, words):
    problems = thresholds.errors(raw)
    assert list(problems) == [key] and words in problems[key], problems


def test_effective_over_the_defaults():
    assert thresholds.effective({}) == {"throughput": {"ok": 30, "warning": 10}, "latency": {"ok": 20, "warning": 80}}
    t = thresholds.effective({"goodGbps": 50, "warnRttMs": 120})
    assert t == {"throughput": {"ok": 50, "warning": 10}, "latency": {"ok": 20, "warning": 120}}
    # crossed bounds (a stored row ingest would refuse today): that kind's defaults
    assert thresholds.effective({"goodGbps": 5})["throughput"] == {"ok": 30, "warning": 10}
    assert thresholds.effective({"goodRttMs": 100, "goodGbps": 50})["latency"] == {"ok": 20, "warning": 80}
    assert thresholds.effective({"goodRttMs": 100, "goodGbps": 50})["throughput"] == {"ok": 50, "warning": 10}


def test_unknown_keys_are_ignored_not_refused():
    assert thresholds.errors({"good": 5, "throughput": {"ok": 30}, "goodGbps": 40}) == {}
    assert thresholds.unknown({"good": 5, "goodGbps": 40}) == ["good"]


@pytest.mark.parametrize("junk", [None, "fast", [1, 2], {"goodGbps": "x", "warnGbps": [1], "goodRttMs": -3},
                                  {"throughput": {"ok": "a"}}, {"goodGbps": 1, "warnGbps": 9}])
def test_effective_never_fails_on_stored_junk(junk):
    t = thresholds.effective(junk)
    for kind in ("throughput", "latency"):
        assert set(t[kind]) == {"ok", "warning"} and all(isinstance(v, float) for v in t[kind].values())
    assert t["throughput"]["ok"] >= t["throughput"]["warning"] and t["latency"]["ok"] <= t["latency"]["warning"]


def test_classify():
    t = {"ok": 30, "warning": 10}
    assert thresholds.classify(30, "succeeded", "throughput", t) == "ok"
    assert thresholds.classify(10, "succeeded", "throughput", t) == "warning"
    assert thresholds.classify(9.9, "succeeded", "throughput", t) == "critical"
    assert thresholds.classify(None, None, "throughput", t) == "none"
    assert thresholds.classify(50, "failed", "throughput", t) == "failed"
    lat = {"ok": 20, "warning": 80}
    assert thresholds.classify(5, "succeeded", "latency", lat) == "ok"
    assert thresholds.classify(80, "succeeded", "latency", lat) == "warning"
    assert thresholds.classify(81, "succeeded", "latency", lat) == "critical"


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"efficiency": 0.8}, "efficiency", "must be an object {warning, critical}, not float"),
        ({"efficiency": {"warning": 0}}, "efficiency.warning", "must be in (0, 1]"),
        ({"efficiency": {"critical": 1.2}}, "efficiency.critical", "must be in (0, 1]"),
        ({"efficiency": {"warning": "high"}}, "efficiency.warning", "must be a number, not str"),
        ({"efficiency": {"warning": 0.5, "critical": 0.5}}, "efficiency.warning", "warning (0.5) must be above"),
        ({"efficiency": {"critical": 0.9}}, "efficiency.critical", "above critical (0.9) with the defaults filled"),
    ],
)
def test_efficiency_errors_name_the_key(raw, key, words):
    problems = thresholds.errors(raw)
    assert list(problems) == [key] and words in problems[key], problems


def test_efficiency_bounds_and_state():
    assert thresholds.errors({"efficiency": {"warning": 1, "critical": 0.2}}) == {}
    assert thresholds.unknown({"efficiency": {}}) == []
    assert thresholds.errors({"efficiency": {"ok": "x", "warning": 0.9}}) == {}  # unknown keys: ignored
    assert thresholds.known_efficiency({"ok": "x", "warning": 0.9}) == {"warning": 0.9}
    assert thresholds.effective_efficiency({}) == {"warning": 0.8, "critical": 0.5}
    assert thresholds.effective_efficiency({"efficiency": {"warning": 0.95}}) == {"warning": 0.95, "critical": 0.5}
    assert thresholds.effective_efficiency({"efficiency": {"warning": 0.1}}) == {"warning": 0.8, "critical": 0.5}
    b = {"warning": 0.8, "critical": 0.5}
    assert [thresholds.classify_efficiency(e, "succeeded", b) for e in (0.8, 0.79, 0.5, 0.49, None)] == [
        "ok", "warning", "warning", "critical", "none"]
    assert thresholds.classify_efficiency(0.9, "failed", b) == "failed"
