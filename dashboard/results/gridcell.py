"""A grid cell's fields: their one definition. Every builder of a cell takes the names and their order from FIELDS
(the stored JSON body in celljson, the PostgreSQL rows and JSON in selectors, the Python cells of SQLite), and
tests/integration/dashboard/test_grid_cell_fields.py holds each builder's output (and GridCellSerializer, the
OpenAPI contract) to it.

A field comes from one of four places: a node's name (``node``), the protocol's metric (``metric``: throughput_gbps,
or rtt_ms for rtt), a PairLatest column (``row``), or the request (``request``: age_seconds, stale and state change
with time, thresholds and maintenance windows, so they are computed per request and never stored), or the
cell's diagnosis (``diagnosis``: DIAGNOSIS, the limit model's answer on its newest measurement, which the analysis
writes to CellDiagnosis (its JSON on the cell's PairLatest row) and the builders join in; every builder puts them
last). The stored fields keep the definition's order in every builder and so do the per-request ones; where the
per-request ones go differs by path (the stored JSON body is joined after them, the Python cells get them last),
which the API has always answered so."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

Origin = Literal["node", "metric", "row", "request", "measurement", "diagnosis"]
JsonKind = Literal["text", "number", "boolean", "time"]
T = TypeVar("T")


@dataclass(frozen=True)
class Field:
    """One field of a cell: its name in the API, where it comes from, and how JSON writes it."""

    name: str
    origin: Origin
    column: str = ""  # node: PairLatest's id column; row: PairLatest's column when it is not the name
    json: JsonKind = "text"
    nullable: bool = False

    @property
    def stored(self) -> bool:
        """Written with the PairLatest row (its JSON body); False: computed per request."""
        return self.origin not in ("request", "diagnosis")

    @property
    def row_name(self) -> str:
        """Its column's name in the SQL rows a cell is built from (a node's id before its name is joined in)."""
        return self.column if self.origin == "node" else self.name

    def latest_column(self, metric: str) -> str:
        """The PairLatest column it is read from (``metric``: the protocol's)."""
        if self.origin == "metric":
            return metric
        if self.origin in ("node", "row"):
            return self.column or self.name
        raise ValueError(f"{self.name} is not a PairLatest column")


FIELDS: tuple[Field, ...] = (
    Field("source", "node", column="source_id"),
    Field("destination", "node", column="destination_id"),
    Field("streams", "row", json="number"),  # 0: a protocol without a stream count
    Field("address_family", "row"),
    Field("congestion_control", "row"),  # "": the nodes' default
    Field("auth", "row"),  # "": a protocol without auth modes
    Field("storage", "row", column="storage_setting"),  # memory, disk, disk-to-memory, memory-to-disk
    Field("value", "metric", json="number", nullable=True),
    Field("finished_at", "row", json="time"),
    Field("age_seconds", "request", json="number"),
    Field("stale", "request", json="boolean"),
    Field("status", "row"),
    Field("error", "row", nullable=True),
    Field("count", "row", column="repeats", json="number"),  # latest: the run's repeats; a window: its measurements
    Field("low", "row", json="number", nullable=True),
    Field("high", "row", json="number", nullable=True),
    Field("state", "request"),
)
# streams=newest only (selectors.Pick): the concurrency the cell's measurement ran, last; not a PairLatest column
CONCURRENCY = Field("concurrency", "measurement", json="number", nullable=True)

# The limit model's answer on the cell's newest measurement (CellDiagnosis; a window's cell: its newest's), last in
# every builder; binding_limit "" and the rest null: not diagnosed (an RTT cell, a failed test, not yet analysed)
DIAGNOSIS = (
    Field("binding_limit", "diagnosis"),  # results/diagnosis/limits.py's LIMITS
    Field("efficiency", "diagnosis", json="number", nullable=True),  # measured ÷ the pair's path capacity
    Field("evidence", "diagnosis", nullable=True),  # the model's reason, with its figures
    Field("fix", "diagnosis", nullable=True),  # the binding limit's fix; null without one
)
DIAGNOSIS_NAMES = tuple(f.name for f in DIAGNOSIS)
NOT_DIAGNOSED: dict[str, object] = {"binding_limit": "", "efficiency": None, "evidence": None, "fix": None}

NAMES = tuple(f.name for f in FIELDS)
STORED = tuple(f for f in FIELDS if f.stored)
STORED_NAMES = tuple(f.name for f in STORED)
PER_REQUEST = tuple(f for f in FIELDS if not f.stored)
PER_REQUEST_NAMES = tuple(f.name for f in PER_REQUEST)


def names(newest: bool = False) -> tuple[str, ...]:
    """A cell's fields in the definition's order, with concurrency for streams=newest, then its diagnosis."""
    return (*NAMES, *((CONCURRENCY.name,) if newest else ()), *DIAGNOSIS_NAMES)


def ordered(values: Mapping[str, T], fields: tuple[Field, ...] = FIELDS) -> list[tuple[Field, T]]:
    """A builder's value (or SQL expression) per field, in the definition's order; ValueError when it misses one
    of ``fields`` or has one more."""
    wanted = {f.name for f in fields}
    if set(values) != wanted:
        missing, extra = sorted(wanted - set(values)), sorted(set(values) - wanted)
        raise ValueError(f"a grid cell's fields (results.gridcell): missing {missing}, unknown {extra}")
    return [(f, values[f.name]) for f in fields]


def select_sql(exprs: Mapping[str, str], fields: tuple[Field, ...] = FIELDS, as_rows: bool = False) -> str:
    """A SELECT list of ``fields`` from an SQL expression per field, each named for the API (``as_rows``: a
    node's field by its id column, for an outer query to join its name in)."""
    return ", ".join(f"{expr} AS {f.row_name if as_rows else f.name}" for f, expr in ordered(exprs, fields))


def stored_cell(**values: object) -> dict[str, object]:
    """A Python cell's stored fields, in the definition's order."""
    return {f.name: v for f, v in ordered(values, STORED)}


def diagnosis_members(values: Mapping[str, object]) -> str:
    """The JSON members of DIAGNOSIS (no braces), in order: what PairLatest.diagnosis_json keeps for the database's
    grid JSON (written once by the analysis, so a grid read concatenates it instead of encoding two texts per cell)."""
    return ",".join(f"{json.dumps(f.name)}:{json.dumps(v, ensure_ascii=False)}" for f, v in ordered(values, DIAGNOSIS))


NOT_DIAGNOSED_MEMBERS = diagnosis_members(NOT_DIAGNOSED)
