"""The grid's latest cells as stored JSON (PostgreSQL): each PairLatest row keeps its cell's fields, but the ones
that change with time or thresholds (age_seconds, stale, state), as a JSON object body written with the row
(`cell_json`); the grid's JSON is those bodies joined with the three fields computed per request. A 100×100 grid
of every setting is then a string concatenation instead of a row-to-JSON conversion per cell."""

from __future__ import annotations

ISO = """'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'"""  # RFC 3339 UTC with microseconds (the API's time format)


def cell_json_sql(row: str, source_name: str, destination_name: str) -> str:
    """SQL for a cell's JSON body (no braces) from a row ``row`` with PairLatest's columns (``streams`` already
    0 for none) and its nodes' names."""
    return f"""(
        '"source":' || to_json({source_name})::text || ',"destination":' || to_json({destination_name})::text
        || ',"streams":' || {row}.streams || ',"address_family":' || to_json({row}.address_family)::text
        || ',"congestion_control":' || to_json({row}.congestion_control)::text
        || ',"auth":' || to_json({row}.auth)::text
        || ',"value":' || coalesce((CASE WHEN {row}.protocol = 'rtt' THEN {row}.rtt_ms
                                         ELSE {row}.throughput_gbps END)::text, 'null')
        || ',"finished_at":"' || to_char({row}.finished_at AT TIME ZONE 'UTC', {ISO})
        || '","status":' || to_json({row}.status)::text || ',"error":' || coalesce(to_json({row}.error)::text, 'null')
        || ',"count":' || {row}.repeats || ',"low":' || coalesce({row}.low::text, 'null')
        || ',"high":' || coalesce({row}.high::text, 'null'))"""


def fill_sql(where: str = "true") -> str:
    """UPDATE that (re)writes the stored JSON of the cells matching ``where`` (on PairLatest ``p``). The newest
    migration that changes the JSON's fields calls it (0011_auth_cells); earlier ones must not (they lack later
    columns)."""
    return f"""
        UPDATE results_pairlatest p SET cell_json = {cell_json_sql("p", "s.name", "d.name")}
        FROM results_node s, results_node d WHERE s.id = p.source_id AND d.id = p.destination_id AND ({where})"""
