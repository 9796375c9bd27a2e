"""The contract check: the compiled fast path (fastjsonschema) never lets through what jsonschema refuses."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import fastjsonschema
import pytest
from results import contract

from tests.support.dashboard import batch, loss_summary, measurement

BAD_VALUES = [None, -1, 0, 1.5, 10**30, "", "x" * 300, "not-a-uuid", True, [], {}, "2026-13-40T99:00:00Z"]


def valid_batch() -> dict[str, Any]:
    t = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    return batch([measurement("a", "b", files=2, finished=t), measurement("b", "a", protocol="rtt", finished=t)],
                 nodes=[{"name": "a", "site": "s1", "loopback_gbps": 40.0}, {"name": "b"}],
                 thresholds={"goodGbps": 30, "warnGbps": 10, "goodRttMs": 20, "warnRttMs": 80})


def valid_loss_batch() -> dict[str, Any]:
    t = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    return {"cluster": "c1", "summaries": [loss_summary("a", "b", t),
                                           loss_summary("b", "a", t, one_way_ms=None, trusted=False, sent=0)]}


VALID = {"ingestBatch": valid_batch, "lossBatch": valid_loss_batch}


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*path, k)
            yield from leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*path, i)
            yield from leaves(v, (*path, i))


def mutations(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every value replaced by every bad value, and every key removed."""
    for path in leaves(doc):
        for bad in [*BAD_VALUES, "REMOVE"]:
            out = copy.deepcopy(doc)
            parent = out
            for p in path[:-1]:
                parent = parent[p]
            if bad == "REMOVE":
                if isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    continue
            else:
                parent[path[-1]] = bad
            yield out


def fast_accepts(doc: dict[str, Any], definition: str = "ingestBatch") -> bool:
    try:
        contract.fast_check(definition)(doc)
        return True
    except fastjsonschema.JsonSchemaValueException:
        return False


@pytest.mark.parametrize("definition", VALID)
def test_a_valid_batch_passes_the_fast_check(definition):
    doc = VALID[definition]()
    assert fast_accepts(doc, definition)
    assert contract.contract_errors(definition, doc) == []


@pytest.mark.parametrize("definition", VALID)
def test_the_fast_check_is_never_laxer_than_jsonschema(definition):
    checked = refused = 0
    for doc in mutations(VALID[definition]()):
        full = list(contract.validator(definition).iter_errors(doc))
        if fast_accepts(doc, definition):
            assert not full, (doc, [e.message for e in full])
        else:
            refused += 1
            # then jsonschema decides: its complaints (or none, where the fast path is the stricter one on a
            # format) are what the client hears
            assert bool(contract.contract_errors(definition, doc)) == bool(full), doc
        checked += 1
    assert checked > 500 and refused > 200, (checked, refused)


def test_refused_documents_are_reported_by_jsonschema_with_their_path():
    doc = valid_batch()
    doc["measurements"][0]["streams"] = "8"
    assert not fast_accepts(doc)
    assert contract.contract_errors("ingestBatch", doc) == [
        {"field": "measurements[0].streams", "message": "'8' is not of type 'integer', 'null'"}]


def test_a_name_is_blank_exactly_when_the_dashboard_trims_it_away():
    """The contract's name pattern lists the whitespace characters itself: `\\s` means fewer characters in the
    ECMA regexes clients validate with than in Python's str.strip, with which DRF trims (a name of U+001D passed
    the schema and was refused as blank; schemathesis found it)."""
    import re
    import sys

    pattern = re.compile(contract.schema()["$defs"]["name"]["pattern"])
    for code in range(1, sys.maxunicode + 1):
        ch = chr(code)
        assert bool(pattern.match(ch)) == bool(ch.strip()), f"U+{code:04X}"
    assert pattern.match(" \u001dA\u3000") and not pattern.match(" \u001d\u3000")


def test_the_contracts_time_pattern_is_the_parsers_range_guard():
    """A time the parser cannot put in UTC's years 1-9999 is refused by the contract already (schema-valid data
    must be stored); one place says which."""
    import json

    from results import rfc3339
    from results.contract import SCHEMA_PATH

    assert json.loads(SCHEMA_PATH.read_text())["$defs"]["time"]["pattern"] == rfc3339.IN_RANGE_PATTERN
