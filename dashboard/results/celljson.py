"""The grid's latest cells as stored JSON (PostgreSQL): each PairLatest row keeps its cell's fields, but the ones
that change with time or thresholds (age_seconds, stale, state), as a JSON object body written with the row
(`cell_json`); the grid's JSON is those bodies joined with the three fields computed per request. A 100×100 grid
of every setting is then a string concatenation instead of a row-to-JSON conversion per cell. The fields, their
order and JSON types are results.gridcell's."""

from __future__ import annotations

from collections.abc import Mapping

from results import gridcell

ISO = """'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'"""  # RFC 3339 UTC with microseconds (the API's time format)


class JsonText(str):
    """An SQL expression whose value is already its JSON text (a CASE of quoted literals): written as it is, without
    to_json's call per row (~0.3 µs a cell; a 100×100 grid of every setting has 19 800)."""


def json_value_sql(field: gridcell.Field, expr: str) -> str:
    """SQL for the JSON text of a field's value ``expr``."""
    if isinstance(expr, JsonText):
        return expr
    if field.json == "time":
        text = f"""'"' || to_char({expr} AT TIME ZONE 'UTC', {ISO}) || '"'"""
    elif field.json == "text":
        text = f"to_json({expr})::text"
    else:  # number, boolean: their text is their JSON
        text = f"({expr})::text"
    return f"coalesce({text}, 'null')" if field.nullable else text


def json_members_sql(exprs: Mapping[str, str], fields: tuple[gridcell.Field, ...]) -> str:
    """SQL for the members ``"name":value`` of ``fields`` (no braces, no trailing comma), each from an SQL
    expression per field, in the definition's order."""
    return "\n        || ".join(f"""'{"," if i else ""}"{f.name}":' || {json_value_sql(f, expr)}"""
                                for i, (f, expr) in enumerate(gridcell.ordered(exprs, fields)))


def cell_json_sql(row: str, source_name: str, destination_name: str) -> str:
    """SQL for a cell's JSON body (no braces): gridcell's stored fields, from a row ``row`` with PairLatest's
    columns (``streams`` already 0 for none) and its nodes' names."""
    names = {"source_id": source_name, "destination_id": destination_name}
    metric = f"CASE WHEN {row}.protocol = 'rtt' THEN {row}.rtt_ms ELSE {row}.throughput_gbps END"

    def expr(f: gridcell.Field) -> str:
        if f.origin == "node":
            return names[f.column]
        return metric if f.origin == "metric" else f"{row}.{f.latest_column(metric)}"

    return f"({json_members_sql({f.name: expr(f) for f in gridcell.STORED}, gridcell.STORED)})"


def fill_sql(where: str = "true") -> str:
    """UPDATE that (re)writes the stored JSON of the cells matching ``where`` (on PairLatest ``p``). Migrations keep
    their own copy of the SQL they ran (0011_auth_cells): this one follows today's fields."""
    return f"""
        UPDATE results_pairlatest p SET cell_json = {cell_json_sql("p", "s.name", "d.name")}
        FROM results_node s, results_node d WHERE s.id = p.source_id AND d.id = p.destination_id AND ({where})"""
