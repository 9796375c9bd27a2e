"""The measurement record has one definition, its JSON schema (manifests/schemas/measurement.v1.schema.json): the
operator's copy of an agent's record, the dashboard's stored columns and its API's fields are that schema's fields,
and a test names the field that drifts."""

from __future__ import annotations

import json

from tpcmesh_operator.run.measurements import _MEASUREMENT_FIELDS

from tests.support.paths import REPO

SCHEMA = json.loads((REPO / "manifests/schemas/measurement.v1.schema.json").read_text())["$defs"]
RECORD = set(SCHEMA["transferRecord"]["properties"])
MEASUREMENT = set(SCHEMA["measurement"]["properties"])
# what the operator decides itself rather than copying from the agent's record: the family it sent the test over
OPERATOR_DECIDES = {"address_family"}
# the API's fields that are not the record's: its place in the archive and what the dashboard adds
API_ONLY = {"benchmark", "run", "cluster", "ingested_at", "retransmits", "binding_limit", "efficiency", "diagnosis",
            "storage_setting"}
# the record's fields served elsewhere: a path has its own endpoint (/api/v1/paths/)
API_ELSEWHERE = {"path"}


def test_the_operator_copies_every_field_an_agent_record_shares_with_the_measurement():
    wanted = (RECORD & MEASUREMENT) - OPERATOR_DECIDES
    assert set(_MEASUREMENT_FIELDS) == wanted, (
        f"operator/tpcmesh_operator/run/measurements.py copies {sorted(set(_MEASUREMENT_FIELDS) - wanted)} that the "
        f"schema does not share, and leaves out {sorted(wanted - set(_MEASUREMENT_FIELDS))}")


def test_the_dashboard_stores_and_serves_every_field_of_the_measurement():
    from results.api.serializers import MeasurementDetailSerializer
    from results.models import Measurement
    from results.services import STORED_APART, STORED_FIELDS

    assert set(STORED_FIELDS) | set(STORED_APART) >= MEASUREMENT
    columns = {f.name for f in Measurement._meta.get_fields()}
    assert set(STORED_FIELDS) <= columns, f"no column for {sorted(set(STORED_FIELDS) - columns)}"
    served = set(MeasurementDetailSerializer.Meta.fields)
    assert served - API_ONLY == MEASUREMENT - API_ELSEWHERE, (
        f"the API serves {sorted(served - API_ONLY - MEASUREMENT)} that are not the record's and leaves out "
        f"{sorted(MEASUREMENT - API_ELSEWHERE - served)}")
