"""One error body for every API answer that is not a success: {"detail": text, "errors": [{field, message}]}
(`errors` only where fields are at fault), as the ingest endpoint has always answered and as the OpenAPI schema
(results.api.openapi) declares it."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler


def flatten_errors(detail, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested error structure as a list of {field: "measurements[3].protocol", message}."""
    out: list[dict[str, str]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else str(key))
            out.extend(flatten_errors(value, name))
    elif isinstance(detail, list):
        if all(isinstance(v, str) for v in detail):
            out.extend({"field": prefix or "(body)", "message": str(v)} for v in detail)
        else:
            for i, value in enumerate(detail):
                if value:
                    out.extend(flatten_errors(value, f"{prefix}[{i}]"))
    else:
        out.append({"field": prefix or "(body)", "message": str(detail)})
    return out


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:3])
        response.data = {"detail": f"Invalid request: {summary}", "errors": errors}
    return response
