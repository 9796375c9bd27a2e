"""The OpenAPI schema is a contract the dashboard keeps: schemathesis (all checks, positive and negative cases,
a fixed seed, a bounded number of examples per operation) against the live dashboard on PostgreSQL, with a write
token. Any drift between what the schema says and what the API answers (an undeclared status code, a valid request
refused, an invalid one taken, a body off its schema) fails here. Then the stateful run over the schema's links
(an ingest, then the measurement it stored and the grid of its benchmark), each scenario on an emptied database so
that replays get the same answers (without that reset Hypothesis stopped with FlakyStrategyDefinition: a step's
data came from answers that depended on what earlier scenarios had stored). And the check that the test can fail:
the same run against the schema with one status code taken out reports it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck
from results import thresholds
from schemathesis.checks import CHECKS
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.openapi.checks import UndefinedStatusCode

from tests.support.live_dashboard import SEED_NODE_NAMES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLES = 25  # per operation and phase: the whole run stays within a couple of minutes on 2 cores
SEED = 17
SETTINGS = hypothesis.settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                               suppress_health_check=list(HealthCheck))


DEFAULT_LIMITS = {key: thresholds.DEFAULTS[kind][level] for key, (kind, level) in thresholds.KEYS.items()}


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.upper().replace("Z", "+00:00").replace(":60", ":59"))


def _ordered(item: dict, first: str, last: str) -> None:
    if isinstance(item.get(first), str) and isinstance(item.get(last), str):
        try:
            if _time(item[last]) < _time(item[first]):
                item[first], item[last] = item[last], item[first]
        except ValueError:
            pass  # not a time: the case is meant to be refused anyway


def keep_maintenance_rules(body: dict) -> dict:
    """A maintenance window names a node or a pair (not both, and nodes that exist: the seeded ones) and ends in
    the future, after it starts: rules across fields, like ingest's. Values of a wrong type are left for the
    negative cases."""
    def name_or_none(key: str) -> bool:
        return body.get(key) is None or isinstance(body.get(key), str)

    if isinstance(body.get("node"), str) and name_or_none("source") and name_or_none("destination"):
        body["node"] = SEED_NODE_NAMES[0]
        body.pop("source", None)
        body.pop("destination", None)
    elif body.get("node") is None and name_or_none("source") and name_or_none("destination"):
        body.pop("node", None)
        body["source"], body["destination"] = SEED_NODE_NAMES
    now = datetime.now(UTC)
    starts = _parses(body.get("starts_at"))
    if body.get("starts_at") is None:
        body.pop("starts_at", None)
    ends = _parses(body.get("ends_at"))
    if ends is not None and (starts is not None or "starts_at" not in body):
        start = max(starts or now, now)
        if ends <= start:
            body["ends_at"] = (start + timedelta(days=1)).isoformat()
    return body


def _parses(value) -> datetime | None:
    """An RFC 3339 time with its offset, or None."""
    if not isinstance(value, str):
        return None
    try:
        t = _time(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def keep_efficiency_rule(bounds) -> None:
    """thresholds.efficiency: warning above critical with the defaults filled in (values of a wrong type or out of
    (0, 1] are left for the negative cases)."""
    if not isinstance(bounds, dict):
        return
    given = {k: v for k, v in bounds.items() if k in thresholds.EFFICIENCY_DEFAULTS
             and isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1}
    if len(given) < len([k for k in bounds if k in thresholds.EFFICIENCY_DEFAULTS]):
        return
    effective = {**thresholds.EFFICIENCY_DEFAULTS, **given}
    if effective["warning"] <= effective["critical"]:
        high, low = max(effective.values()), min(effective.values())
        if low < high:
            bounds["warning"], bounds["critical"] = high, low
        elif high / 2 > 0:
            bounds["warning"], bounds["critical"] = high, high / 2
        else:  # the smallest float: half of it is 0.0, outside (0, 1]
            bounds["warning"], bounds["critical"] = 1.0, high


def keep_cross_field_rules(body):
    """The ingest rules JSON Schema cannot state (they relate two fields, or a batch to what is stored; the loss
    ingest's too, keep_loss_rules):
    finished_at not before started_at, destination not the source, goodGbps >= warnGbps and goodRttMs <= warnRttMs,
    efficiency.warning > efficiency.critical,
    node names unique across clusters. Generated batches are made to
    follow them, so a 400 for them is not read as a valid batch refused; the server's own checks of these rules
    are tested in test_api.py."""
    if not isinstance(body, dict):
        return body
    if "reason" in body and "ends_at" in body:
        return keep_maintenance_rules(body)
    # One cluster: a node name in several clusters makes the pair endpoints refuse a bare name with 400 by design
    # (name it cluster:node, test_federation.py), which no schema of a query can say. Seen when the generated
    # batches changed with the contract (a node "0" ingested into two clusters, then /pairs/history/?source=0).
    name = body.get("cluster")
    if isinstance(name, str) and name.strip() and "\x00" not in name and len(name) <= 253:  # a valid name only
        body["cluster"] = "default"
    # and a described node of another cluster (nodes[].cluster, in the measurement and the loss batches) is too
    nodes = body.get("nodes")
    for n in nodes if isinstance(nodes, list) else []:
        other = n.get("cluster") if isinstance(n, dict) else None
        if isinstance(other, str) and other.strip() and "\x00" not in other and len(other) <= 253:
            n["cluster"] = "default"
    summaries = body.get("summaries")
    for s in summaries if isinstance(summaries, list) else []:
        if isinstance(s, dict):
            keep_loss_rules(s)
    measurements = body.get("measurements")
    for m in measurements if isinstance(measurements, list) else []:  # negative cases send any type here
        if not isinstance(m, dict):
            continue
        _ordered(m, "started_at", "finished_at")
        # equal as the dashboard reads them: it trims names (so "\x1c0" is "0")
        if (isinstance(m.get("source"), str) and isinstance(m.get("destination"), str)
                and m["destination"].strip() == m["source"].strip()):
            m["destination"] = (m["source"][:250] + "-to").strip() or "to"
        files = m.get("files")
        for f in files if isinstance(files, list) else []:
            if isinstance(f, dict):
                _ordered(f, "started_at", "finished_at")
    limits = (body.get("benchmark") or {}).get("thresholds") if isinstance(body.get("benchmark"), dict) else None
    if isinstance(limits, dict):
        given = {k: v for k, v in limits.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        effective = {**DEFAULT_LIMITS, **given}
        for high, low in (("goodGbps", "warnGbps"), ("warnRttMs", "goodRttMs")):
            if {high, low} & (limits.keys() - given.keys()):
                continue  # a value of a wrong type: a negative case, left as generated
            if effective[high] < effective[low]:  # with the defaults filled in, as the server reads them
                limits[high], limits[low] = effective[low], effective[high]
        keep_efficiency_rule(limits.get("efficiency"))
    return body


def keep_loss_rules(summary: dict) -> None:
    """A loss summary's rules across fields (results.loss.ingest.rule_errors, 422): the period ends after it
    starts, the peer is not the node, lost <= sent."""
    _ordered(summary, "period_start", "period_end")
    node, peer = summary.get("node"), summary.get("peer")
    if isinstance(node, str) and isinstance(peer, str) and node.strip() == peer.strip():
        summary["peer"] = (node[:250] + "-to").strip() or "to"
    sent, lost = summary.get("sent"), summary.get("lost")
    counts = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (sent, lost))  # 12.0 is an integer
    if counts and lost > sent:
        summary["sent"], summary["lost"] = lost, sent


# gunicorn refuses a request line longer than this itself, with an HTML 400, before the API sees it (its
# limit_request_line); queries that long are the server's limit, not the API's contract. Kept well under the limit:
# the method, path and schemathesis's own encoding of odd values add to the encoded query.
QUERY_MAX = 3000


def fits_a_request_line(query) -> bool:
    return not isinstance(query, dict) or len(urlencode(query, doseq=True)) < QUERY_MAX


@pytest.fixture(scope="module")
def api_schema(live_dashboard):
    schema = schemathesis.openapi.from_url(f"{live_dashboard.url}/api/schema/", config=SchemathesisConfig(seed=SEED))
    schema.config.generation.update(max_examples=EXAMPLES, deterministic=True)
    # a body beyond an operation's documented limit is refused as too large (the loss ingest's 1 000 summaries:
    # 413, which the operator's collector answers by halving its batch), as any other invalid body is refused
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    schema.hook("map_body")(lambda ctx, body: keep_cross_field_rules(body))
    schema.hook("filter_query")(lambda ctx, query: fits_a_request_line(query))
    return schema


def auth_unless_broken(case, headers: dict[str, str]) -> dict[str, str]:
    """The write token, unless the case's own headers are the schema-violating part (a negative case that drops
    or breaks the Authorization header): adding the token back would send a valid request the check reads as
    invalid data accepted (seen on POST /problems/evaluate/ once the schema gained the loss operations)."""
    header = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
    return {} if header is not None and header.mode.is_negative else headers


def test_every_operation_keeps_the_schema(api_schema, live_dashboard):
    """Each operation: EXAMPLES schema-valid and EXAMPLES schema-violating requests, every check on each answer.
    (Per operation in one test rather than schemathesis.pytest.from_fixture, which fails on pytest 9.)"""
    headers = {"Authorization": f"Token {live_dashboard.token}"}
    live_dashboard.reset()  # the seeded nodes
    failures = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @SETTINGS
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                case.call_and_validate(headers=auth_unless_broken(case, headers), checks=CHECKS.get_all())

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # a lone integer id: no invalid request
            except Exception as err:  # every operation is tried; the report lists them all
                failures.append(f"{operation.label} ({mode.value}): {str(err)[:1500]}")
    assert not failures, "\n\n".join(failures)


def test_linked_operations_keep_the_schema(api_schema, live_dashboard):
    """Ingest, then follow the schema's links (the stored measurement, the grid of its benchmark)."""
    # the operations the links join (other operations would only dilute the steps; each has its own test above)
    machine = api_schema.include(path_regex="/(ingest|measurements|grid)/").as_state_machine()

    calls: list[str] = []

    class Workflow(machine):  # type: ignore[misc,valid-type]
        def setup(self):
            live_dashboard.reset()

        def before_call(self, case):
            calls.append(case.operation.label)

        def get_call_kwargs(self, case):
            return {"headers": {"Authorization": f"Token {live_dashboard.token}"}}

        def validate_response(self, response, case, **kwargs):
            case.validate_response(response, checks=CHECKS.get_all())

    Workflow.run(settings=hypothesis.settings(SETTINGS, max_examples=EXAMPLES, stateful_step_count=6))
    followed = {label for label in calls if not label.startswith("POST")}
    assert {"GET /api/v1/measurements/{id}/", "GET /api/v1/grid/"} <= followed, sorted(set(calls))


def test_an_undeclared_status_code_fails_the_contract(live_dashboard):
    """The contract test can fail: with 404 taken out of a measurement's documented answers, asking for a missing
    one is reported as an undocumented status code."""
    import httpx

    raw = httpx.get(f"{live_dashboard.url}/api/schema/?format=json", timeout=30).json()
    path = next(p for p in raw["paths"] if p.startswith("/api/v1/measurements/{"))
    del raw["paths"][path]["get"]["responses"]["404"]
    schema = schemathesis.openapi.from_dict(raw, config=SchemathesisConfig(seed=SEED))
    schema.config.update(base_url=live_dashboard.url)
    operation = schema[path]["GET"]
    case = operation.Case(path_parameters={"id": "00000000-0000-4000-8000-000000000000"})
    with pytest.raises(FailureGroup) as failure:
        case.call_and_validate(checks=CHECKS.get_all())
    found = failure.value.exceptions
    assert [type(f) for f in found] == [UndefinedStatusCode], found
    assert found[0].status_code == 404
