"""The CRDs on a real kube-apiserver: defaults applied, malformed objects rejected with the field named."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.operator_support import apply_crds, ensure_namespace

pytestmark = pytest.mark.cluster
NS = "op-crds"
G, V = "tpcmesh.io", "v1alpha1"


@pytest.fixture(scope="module")
def api(control_plane):
    c = control_plane.client()
    apply_crds(c)
    ensure_namespace(c, NS)
    return client.CustomObjectsApi(c)


def tb(name: str, spec: dict) -> dict:
    return {"apiVersion": f"{G}/{V}", "kind": "TransferBenchmark", "metadata": {"name": name}, "spec": spec}


def test_defaults_are_applied(api) -> None:
    api.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb("defaults", {}))
    spec = api.get_namespaced_custom_object(G, V, NS, "transferbenchmarks", "defaults")["spec"]
    assert spec["schedule"] == "@every 12h"
    assert spec["streams"] == [8, 1] and spec["concurrency"] == 11
    assert spec["fileSet"] == {"count": 11, "size": "1GB"}
    assert spec["latency"] == {"enabled": True, "count": 5, "path": True}
    assert spec["protocols"] == ["xrootd-https", "gridftp"]
    assert spec["pairs"] == {"mode": "fullMesh", "direction": "both"}
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["thresholds"] == {"goodGbps": 30, "warnGbps": 10, "goodRttMs": 20, "warnRttMs": 80}
    assert spec["loopback"] == {"enabled": True, "protocol": "iperf3"}
    assert spec["storage"] == ["memory"]
    # and the short names / printer columns exist
    ext = client.ApiextensionsV1Api(api.api_client)
    crd = ext.read_custom_resource_definition("transferbenchmarks.tpcmesh.io")
    assert crd.spec.names.short_names == ["tb"]
    cols = [c.name for c in crd.spec.versions[0].additional_printer_columns]
    assert {"Schedule", "Last Run", "Next Run", "OK", "Failed", "Age"} <= set(cols)


BAD = [
    ({"schedule": "every day"}, "spec.schedule must be a 5-field cron expression"),
    ({"schedule": "*/10 * * * * *"}, "spec.schedule must be a 5-field cron expression"),  # croniter's seconds
    ({"schedule": "30m1h"}, "spec.schedule must be a 5-field cron expression"),
    ({"schedule": "@every 10s"}, "spec.schedule: an interval must be at least one minute"),
    ({"schedule": "0h30s"}, "spec.schedule: an interval must be at least one minute"),
    ({"protocols": ["ftp"]}, "spec.protocols[0]"),
    ({"streams": [0]}, "spec.streams[0]"),
    ({"streams": [8, 8]}, "spec.streams[1]: Duplicate value"),
    ({"concurrency": 0}, "spec.concurrency"),
    ({"timeoutSeconds": 0}, "spec.timeoutSeconds"),
    ({"fileSet": {"dataset": "small", "count": 2}}, "spec.fileSet: give either dataset, or both count and size"),
    ({"fileSet": {"count": 2, "size": "1 parsec"}}, "spec.fileSet.size must look like 1GB"),
    ({"fileSet": {"dataset": "huge"}}, "spec.fileSet.dataset"),
    ({"pairs": {"mode": "explicit"}}, "spec.pairs.explicit: mode explicit needs at least one"),
    ({"pairs": {"mode": "explicit", "explicit": [{"source": "a", "destination": "a"}]}},
     "source and destination must be different nodes"),
    ({"pairs": {"mode": "groups"}}, "spec.pairs.groupA and spec.pairs.groupB are required"),
    ({"results": {"url": "dashboard"}}, "spec.results.url must be an http(s) URL"),
    ({"concurrencyPolicy": "Allow"}, "spec.concurrencyPolicy"),
    ({"protocols": [], "latency": {"enabled": False}}, "spec.protocols: nothing to measure"),
    ({"thresholds": {"goodGbps": 5, "warnGbps": 10}}, "spec.thresholds.goodGbps must be at least"),
    ({"thresholds": {"goodGbps": 5}}, "spec.thresholds.goodGbps must be at least"),  # the default warnGbps is 10
    ({"thresholds": {"goodRttMs": 100, "warnRttMs": 50}}, "spec.thresholds.goodRttMs must be at most"),
    ({"thresholds": {"warnGbps": -1}}, "spec.thresholds.warnGbps: Invalid value: -1"),
    ({"thresholds": {"warnRttMs": "fast"}}, "spec.thresholds.warnRttMs in body must be of type number"),
    ({"thresholds": {"efficiency": {"warning": 0.5, "critical": 0.7}}},
     "spec.thresholds.efficiency.warning must be above spec.thresholds.efficiency.critical"),
    ({"thresholds": {"efficiency": {"critical": 0.9}}},  # the default warning is 0.8
     "spec.thresholds.efficiency.warning must be above spec.thresholds.efficiency.critical"),
    ({"thresholds": {"efficiency": {"warning": 0}}}, "spec.thresholds.efficiency.warning: Invalid value: 0"),
    ({"thresholds": {"efficiency": {"critical": 1.5}}}, "spec.thresholds.efficiency.critical: Invalid value: 1.5"),
    ({"loopback": {"protocol": "gridftp"}}, "spec.loopback.protocol: Unsupported value"),
    ({"iperf3": {"durationSeconds": 0}}, "spec.iperf3.durationSeconds"),
    ({"timeoutSeconds": 10}, "spec.iperf3.durationSeconds must be shorter than spec.timeoutSeconds"),  # loopback
    ({"protocols": ["iperf3"], "loopback": {"enabled": False}, "timeoutSeconds": 5, "iperf3": {"durationSeconds": 5}},
     "spec.iperf3.durationSeconds must be shorter than spec.timeoutSeconds"),
    ({"tcp": {"congestionControl": ["BBR"]}}, "spec.tcp.congestionControl[0]"),
    ({"tcp": {"congestionControl": ["bbr", "bbr"]}}, "spec.tcp.congestionControl[1]: Duplicate value"),
    ({"externalEndpoints": [{"name": "x", "url": "http://x.example", "path": "/s"}]},
     "spec.externalEndpoints[].url must be davs|https|root|gsiftp://host[:port]"),
    ({"externalEndpoints": [{"name": "x", "url": "root://x.example/data", "path": "/s"}]},
     "spec.externalEndpoints[].url must be davs|https|root|gsiftp://host[:port], without a path"),
    ({"externalEndpoints": [{"name": "x", "url": "davs://x.example", "path": "/s/../etc"}]},
     "spec.externalEndpoints[].path must be an absolute path of plain names"),
    ({"externalEndpoints": [{"name": "x", "url": "davs://x.example", "path": "/"}]},
     "spec.externalEndpoints[].path must be an absolute path of plain names"),
    ({"externalEndpoints": [{"name": "x", "url": "davs://x.example", "path": "/s", "role": "sink"}]},
     "spec.externalEndpoints[0].role: Unsupported value"),
    ({"externalEndpoints": [{"name": "x", "url": "davs://x.example"}]}, "spec.externalEndpoints[0].path: Required"),
    ({"optimizeBounds": {"streamsMax": 4}}, "spec.optimizeBounds: bounds without spec.optimize: true"),
    ({"optimize": True, "protocols": ["iperf3"]}, "spec.optimize: tunes the file movers' streams and files"),
    ({"optimize": True, "optimizeBounds": {"streamsMax": 0}}, "spec.optimizeBounds.streamsMax"),
    ({"optimize": True, "fileSet": {"count": 4, "size": "1MB"}, "optimizeBounds": {"concurrencyMax": 8}},
     "spec.optimizeBounds.concurrencyMax: more files at once than the file set has"),
    ({"storage": ["disk", "tape"]}, "spec.storage[1]: Unsupported value"),
    ({"storage": ["disk"], "protocols": ["iperf3"]}, "spec.storage: disk applies to the file movers"),
    ({"storage": ["memory", "disk"], "destination": "sink"}, "spec.storage: disk writes the files on the destination"),
    ({"lossProbe": {"enabled": True, "ratePps": 0}}, "spec.lossProbe.ratePps must be at least 0.1"),
    ({"lossProbe": {"ratePps": 0.05}}, "spec.lossProbe.ratePps"),
    ({"lossProbe": {"maxClockErrorMs": 0}}, "spec.lossProbe.maxClockErrorMs must be at least 0.001"),
    ({"lossProbe": {"paddingBytes": 26}}, "spec.lossProbe.paddingBytes"),
    ({"lossProbe": {"periodSeconds": 5}}, "spec.lossProbe.periodSeconds"),
    ({"lossProbe": {"externalReflectors": [{"name": "ps", "address": "ps.example.org"}]}},
     "spec.lossProbe.externalReflectors[].address must be an IPv4 or IPv6 address"),
    ({"lossProbe": {"allowedSenders": ["192.0.2.300"]}},
     "spec.lossProbe.allowedSenders[] must be an IPv4 or IPv6 address"),
]


def test_loss_probe_defaults_are_applied(api) -> None:
    api.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb("loss", {"lossProbe": {
        "enabled": True, "externalReflectors": [{"name": "ps", "address": "2001:db8::5"}]}}))
    spec = api.get_namespaced_custom_object(G, V, NS, "transferbenchmarks", "loss")["spec"]
    assert spec["lossProbe"] == {"enabled": True, "ratePps": 10, "paddingBytes": 27, "dscp": 0, "periodSeconds": 60,
                                 "maxClockErrorMs": 1,
                                 "externalReflectors": [{"name": "ps", "address": "2001:db8::5", "port": 863}]}


@pytest.mark.parametrize("spec,message", BAD, ids=[m[:40] for _, m in BAD])
def test_malformed_benchmarks_are_rejected_naming_the_field(api, spec, message) -> None:
    with pytest.raises(ApiException) as e:
        api.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb("bad", spec))
    assert e.value.status == 422, e.value.body
    assert message in e.value.body, e.value.body


def test_efficiency_thresholds_in_range_are_accepted_as_given(api) -> None:
    """Server-side dry run: valid bounds pass the CEL rule and are kept as given (no defaults written in)."""
    body = tb("efficiency", {"thresholds": {"efficiency": {"warning": 0.9, "critical": 0.6}}})
    got = api.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", body, dry_run="All")
    assert got["spec"]["thresholds"]["efficiency"] == {"warning": 0.9, "critical": 0.6}


@pytest.mark.parametrize("schedule", ["@every 90s", "1h30m", "1w2d", "@daily", "*/5 * * * *", "0 0 1 1 *"])
def test_minute_resolution_schedules_are_accepted(api, schedule) -> None:
    name = "ok-" + "".join(c for c in schedule if c.isalnum()).lower()
    api.create_namespaced_custom_object(G, V, NS, "transferbenchmarks", tb(name, {"schedule": schedule}))
    api.delete_namespaced_custom_object(G, V, NS, "transferbenchmarks", name)


def test_transfer_run_needs_a_benchmark_and_is_immutable(api) -> None:
    run = {"apiVersion": f"{G}/{V}", "kind": "TransferRun", "metadata": {"name": "r1"}, "spec": {}}
    with pytest.raises(ApiException) as e:
        api.create_namespaced_custom_object(G, V, NS, "transferruns", run)
    assert e.value.status == 422 and "spec.benchmarkRef or spec.benchmark is required" in e.value.body
    run["spec"] = {"benchmarkRef": {"name": "defaults"}}
    api.create_namespaced_custom_object(G, V, NS, "transferruns", run)
    with pytest.raises(ApiException) as e:
        api.patch_namespaced_custom_object(G, V, NS, "transferruns", "r1", {"spec": {"benchmarkRef": {"name": "x"}}})
    assert e.value.status == 422 and "spec is immutable" in e.value.body
