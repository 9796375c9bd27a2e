"""CSV output (`?format=csv`): the renderer for single documents and the streamed export of whole lists.

Cells that a spreadsheet would run as a formula (starting with = + - @ or a tab/carriage return) get a leading
apostrophe, as OWASP advises against CSV injection: node names and error texts come from the mesh, not from us.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from rest_framework import renderers

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ROWS_PER_CHUNK = 500  # lines per write to the client: one write per row is slow under gunicorn


def csv_cell(value: Any) -> Any:
    """One cell: "" for null, compact JSON for nested values, formula-looking text defused."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose write() returns the line, so csv.writer can feed a generator."""

    def write(self, value: str) -> str:
        return value


def csv_lines(columns: list[str], rows: Iterable[Mapping[str, Any]], limit: int, trailer: str) -> Iterator[str]:
    """The header and at most `limit` rows as CSV text in chunks; `trailer` (a final comment line) is added
    only when more rows were there than `limit`."""
    writer = csv.writer(_Echo(), lineterminator="\n")
    chunk = [writer.writerow(columns)]
    written = 0
    for row in rows:
        if written == limit:
            chunk.append(trailer)
            break
        chunk.append(writer.writerow([csv_cell(row.get(c)) for c in columns]))
        written += 1
        if len(chunk) >= ROWS_PER_CHUNK:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


class CSVRenderer(renderers.BaseRenderer):
    """Non-list answers (one object, an error) as CSV; lists are streamed by api.views.CSVExportMixin."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        rows = data if isinstance(data, list) else [data]
        rows = [r for r in rows if isinstance(r, dict)]
        columns = list(dict.fromkeys(key for row in rows for key in row))
        out = io.StringIO()
        out.writelines(csv_lines(columns, rows, len(rows), ""))
        return out.getvalue().encode()
