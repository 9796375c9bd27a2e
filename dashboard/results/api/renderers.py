"""CSV export of list endpoints (`?format=csv`)."""

from __future__ import annotations

import csv
import io

from rest_framework import renderers


class CSVRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, dict) and "results" in data:
            rows = data["results"]
        elif isinstance(data, list):
            rows = data
        else:
            rows = [data]
        rows = [r for r in rows if isinstance(r, dict)]
        columns: list[str] = []
        for row in rows:
            for key, value in row.items():
                if key not in columns and not isinstance(value, list | dict):
                    columns.append(key)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
        return out.getvalue().encode()
