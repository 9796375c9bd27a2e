"""The measurement contract (manifests/schemas/measurement.v1.schema.json), loaded once."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from jsonschema import Draft202012Validator, FormatChecker

SCHEMA_PATH = Path(settings.REPO_DIR) / "manifests" / "schemas" / "measurement.v1.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=4)
def validator(definition: str) -> Draft202012Validator:
    """A validator for one of the contract's $defs (e.g. ingestBatch), with format checks."""
    root = schema()
    sub = {"$schema": root["$schema"], "$defs": root["$defs"], "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(sub, format_checker=FormatChecker())


def contract_errors(definition: str, document: Any, limit: int = 20) -> list[dict[str, str]]:
    """The contract's complaints about a document, each naming the field by its JSON path."""
    out = []
    for err in validator(definition).iter_errors(document):
        path = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(err.path))
        out.append({"field": path or "(body)", "message": err.message})
        if len(out) >= limit:
            break
    return out
