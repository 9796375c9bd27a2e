"""What drf-spectacular cannot see from the views, added to the generated schema (a postprocessing hook):

- every error answer an operation can give, with the one error body (results.api.errors);
- the ingest body as the measurement contract defines it (manifests/schemas/measurement.v1.schema.json, inlined:
  OpenAPI 3.1 speaks the contract's JSON Schema dialect), so the contract has one definition;
- security as the running dashboard applies it: with READ_ACCESS=open a read needs no credentials (an empty
  requirement `{}` beside the token and the session), ingest always needs a write token.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from results import contract

ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {"type": "string", "description": "what went wrong"},
        "errors": {
            "type": "array",
            "description": "one entry per field at fault, named by its path (e.g. measurements[3].protocol)",
            "items": {"type": "object", "required": ["field", "message"],
                      "properties": {"field": {"type": "string"}, "message": {"type": "string"},
                                     "index": {"type": ["integer", "null"], "description": (
                                         "a batch's item at fault (loss ingest): its place in the batch")}}},
        },
    },
}

READ_ERRORS = {
    "400": "A query parameter is invalid (errors names it).",
    "401": "The Authorization header is malformed or its token unknown or disabled (or, with "
           "READ_ACCESS=token, missing).",
    "404": "No such object, benchmark or node, or an unknown `format`.",
    "406": "No representation for the Accept header.",
}
WRITE_ERRORS = {
    "400": "The body is not valid (for ingest: not JSON or breaks the contract), or breaks a rule across fields "
           "(errors names each field).",
    "401": "No valid API token.",
    "403": "The token is read-only (ingest, acknowledging and maintenance need a token created with --write), or "
           "the signed-in user lacks the permission, or the token is scoped to one cluster and the request writes "
           "another cluster's record (detail names the token, both clusters and the record).",
    "404": "No such object, or an unknown `format`.",
    "406": "No representation for the Accept header.",
    "415": "The body is not of a media type the operation reads.",
}


# What a client does next with an ingest's answer: read a stored measurement back, read the grid of its benchmark.
INGEST_LINKS = {
    "StoredMeasurement": {"operationId": "v1_measurements_retrieve",
                          "parameters": {"id": "$response.body#/ids/0"},
                          "description": "the first measurement this request stored"},
    "BenchmarkGrid": {"operationId": "v1_grid_retrieve",
                      "parameters": {"benchmark": "$request.body#/benchmark/name",
                                     "protocol": "$request.body#/measurements/0/protocol"},
                      "description": "the grid of the batch's benchmark for its first measurement's protocol"},
}


def ingest_body(definition: str = "ingestBatch") -> dict[str, Any]:
    """One of the contract's bodies (ingestBatch, lossBatch) with its references inlined (the schema has no $defs
    of its own in OpenAPI)."""
    root = contract.schema()
    return contract._inline(root["$defs"][definition], root["$defs"])


def _error_content(operation: dict[str, Any]) -> dict[str, Any]:
    """Errors come as JSON, or as CSV text where the operation also answers CSV (`?format=csv`)."""
    content: dict[str, Any] = {"application/json": {"schema": ERROR_REF}}
    if any("text/csv" in (r.get("content") or {}) for r in operation["responses"].values()):
        content["text/csv"] = {"schema": {"type": "string"}}
    return content


NO_NUL = "^[^\\u0000]*$"


def _query_parameter(parameter: dict[str, Any]) -> None:
    """What the API does with every query parameter, said in the schema: an optional one given empty
    (`?window=`, as HTML forms send) reads as absent (the views' params.*, django-filter, DRF's ordering and
    format all do so), and free text may not hold NUL characters (Django's form fields refuse them)."""
    if parameter["in"] != "query":
        return
    if not parameter.get("required"):
        parameter["allowEmptyValue"] = True
    schema = parameter.get("schema", {})
    if schema.get("type") == "string" and not {"enum", "format", "pattern"} & schema.keys():
        schema["pattern"] = NO_NUL


# Request bodies whose serializers refuse fields they do not take (serializers.StrictFields).
STRICT_REQUESTS = ("Maintenance", "AcknowledgeIn")


def postprocess(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    for name in STRICT_REQUESTS:
        schemas[name]["additionalProperties"] = False
    for path, operations in result["paths"].items():
        for method, operation in operations.items():
            reading = method == "get"
            for code, description in (READ_ERRORS if reading else WRITE_ERRORS).items():
                operation["responses"].setdefault(code, {"description": description,
                                                         "content": _error_content(operation)})
            for parameter in operation.get("parameters", []):
                _query_parameter(parameter)
            if reading:
                if settings.READ_ACCESS == "open":
                    operation["security"] = [*operation.get("security", []), {}]
            else:
                operation["security"] = [{"tokenAuth": []}]
            if path.endswith("/loss/ingest/") and method == "post":
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": ingest_body("lossBatch")}}}
                for code in ("413", "422"):
                    operation["responses"][code]["content"] = {"application/json": {"schema": ERROR_REF}}
            elif path.endswith("/ingest/") and method == "post":
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": ingest_body()}}}
                operation["responses"]["200"]["links"] = INGEST_LINKS
    return result
