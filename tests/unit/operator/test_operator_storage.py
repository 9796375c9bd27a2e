"""spec.storage (issue #28, disk mode): parsed with errors naming the field, and planned as a setting of its own for
the file movers (memory->memory, disk->memory, memory->disk, disk->disk with both), with each agent's disk ceilings
measured with the loopback round."""

from __future__ import annotations

import pytest
from tpcmesh_operator.plan.planner import MEMORY_TO_MEMORY, plan, settings_for
from tpcmesh_operator.plan.spec import SpecError, parse_spec, to_dict

BASE = {"protocols": ["builtin", "iperf3"], "streams": [1], "latency": False}


def test_memory_is_the_default_and_keys_stay_as_before() -> None:
    spec = parse_spec(BASE)
    assert spec.storage == ("memory",) and not spec.uses_disk and "storage" not in to_dict(spec)
    assert [s.key for s in settings_for(spec)] == ["builtin/1", "iperf3/1"]
    assert plan(["a", "b"], spec).ceiling_agents == ()


def test_both_storages_measure_each_ends_tax_for_the_file_movers_only() -> None:
    spec = parse_spec({**BASE, "storage": ["memory", "disk"]})
    assert parse_spec(to_dict(spec)) == spec and to_dict(spec)["storage"] == ["memory", "disk"]
    keys = [s.key for s in settings_for(spec)]
    # iperf3 moves no file: once, in memory; the built-in mover in the four combinations, memory->memory first
    assert keys == ["builtin/1", "iperf3/1", "builtin/1/disk-memory", "builtin/1/memory-disk", "builtin/1/disk-disk"]
    disk = [s for s in settings_for(spec) if s.on_disk]
    assert [s.storage_request() for s in disk] == [{"source": "disk", "destination": "memory"},
                                                   {"source": "memory", "destination": "disk"},
                                                   {"source": "disk", "destination": "disk"}]
    p = plan(["a", "b", "c"], spec)
    assert p.ceiling_agents == (0, 1, 2)
    tests = list(p.tests())
    assert len({t.key for t in tests}) == len(tests) == 3 + 5 * 6  # the loopback round + 5 settings x 6 pairs


def test_disk_alone_is_disk_to_disk_and_external_endpoints_stay_in_memory() -> None:
    spec = parse_spec({**BASE, "protocols": ["builtin", "xrootd-https"], "storage": ["disk"],
                       "loopback": {"enabled": False},
                       "externalEndpoints": [{"name": "far", "url": "davs://far.example:1094", "path": "/store",
                                              "role": "source"}]})
    assert [(s.key, s.storage) for s in settings_for(spec)] == [("builtin/1/disk-disk", ("disk", "disk")),
                                                                ("xrootd-https/1/disk-disk", ("disk", "disk"))]
    p = plan(["a", "b"], spec)
    assert p.external_rounds == ()  # disk mode runs between agents only: no memory setting for the endpoint
    assert p.problems == ("external endpoints far are left out: they are measured memory to memory only, and "
                          "spec.storage has no memory",)
    assert p.ceiling_agents == (0, 1)  # measured even without a loopback round
    assert MEMORY_TO_MEMORY not in {s.storage for s in p.settings}


@pytest.mark.parametrize(("raw", "field", "words"), [
    ({"storage": "disk"}, "spec.storage", "expected a non-empty list"),
    ({"storage": []}, "spec.storage", "expected a non-empty list"),
    ({"storage": ["memory", "ssd"]}, "spec.storage[1]", "must be one of memory, disk"),
    ({"storage": ["disk", "disk"]}, "spec.storage", "must not repeat"),
    ({"storage": ["disk"], "protocols": ["iperf3"]}, "spec.storage", "spec.protocols has none of them"),
    ({"storage": ["memory", "disk"], "destination": "sink"}, "spec.storage", "needs spec.destination store"),
])
def test_storage_errors_name_the_field(raw, field, words) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({**BASE, **raw})
    assert e.value.field == field and words in e.value.message
