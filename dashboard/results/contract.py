"""The measurement contract (manifests/schemas/measurement.v1.schema.json), loaded once."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastjsonschema
from django.conf import settings
from jsonschema import Draft202012Validator, FormatChecker

SCHEMA_PATH = Path(settings.REPO_DIR) / "manifests" / "schemas" / "measurement.v1.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with every local "#/$defs/x" reference replaced by its (inlined) target. The contract has no
    recursive references; inlining spares jsonschema a reference lookup per item, several times faster on
    10 000-measurement batches."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = _inline(defs[ref.removeprefix("#/$defs/")], defs)
            rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
            return {**target, **rest} if rest else target
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


@lru_cache(maxsize=4)
def validator(definition: str) -> Draft202012Validator:
    """A validator for one of the contract's $defs (e.g. ingestBatch), with format checks."""
    root = schema()
    sub = _inline(root["$defs"][definition], root["$defs"])
    return Draft202012Validator({"$schema": root["$schema"], **sub}, format_checker=FormatChecker())


# What jsonschema's FormatChecker accepts as a uuid, in the canonical spelling only (so the fast check below never
# accepts a value jsonschema would refuse).
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


# Keywords that constrain a value of any type: a schema holding one is not the same schema once null is added to
# its type. Every other keyword of draft 2020-12 speaks of one type only (minLength of strings, properties of
# objects, minimum of numbers), and says nothing about null.
ANY_TYPE_KEYWORDS = {"enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref"}


def _nullable(node: Any) -> Any:
    """The schema with each ``anyOf: [a schema of one type, {"type": "null"}]`` written as one schema of that
    type or null: the same documents pass, but fastjsonschema tries anyOf's branches in turn and builds a refusal's
    message for each that fails, which made a null (every succeeded measurement's error) or a present object
    after a null branch (eight in each loss summary) cost more than the rest of its checks."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable(v) for k, v in node.items()}
    branches = node.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        other = branches[1 - branches.index({"type": "null"})]
        if isinstance(other, dict) and isinstance(other.get("type"), str) and not set(other) & ANY_TYPE_KEYWORDS:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if not set(rest) & set(other) - {"description"}:
                return {**other, **rest, "type": [other["type"], "null"]}
    return node


@lru_cache(maxsize=4)
def fast_check(definition: str) -> Any:
    """The same sub-schema compiled to Python code by fastjsonschema (the contract uses draft-07's keywords only):
    a valid 5 000-measurement batch passes in a fraction of jsonschema's time. It stops at the first problem, so
    a document it refuses is walked again by jsonschema for every complaint and its messages."""
    root = schema()
    sub = _nullable(_inline(root["$defs"][definition], root["$defs"]))
    return fastjsonschema.compile(sub, formats={"uuid": UUID_PATTERN}, use_default=False)


def passes(definition: str, document: Any) -> bool:
    """The document satisfies the contract's definition (the compiled check alone: no messages)."""
    try:
        fast_check(definition)(document)
        return True
    except fastjsonschema.JsonSchemaValueException:
        return False


def contract_errors(definition: str, document: Any, limit: int = 20) -> list[dict[str, str]]:
    """The contract's complaints about a document, each naming the field by its JSON path."""
    if passes(definition, document):
        return []
    out = []  # jsonschema says what is wrong, and where
    for err in validator(definition).iter_errors(document):
        path = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(err.path))
        out.append({"field": path or "(body)", "message": err.message})
        if len(out) >= limit:
            break
    return out
