"""RFC 3339 date-times (the contract's and the OpenAPI schema's `format: date-time`), parsed as the RFC writes
them: `T`/`Z` in either case and a leap second (:60, read as :59). datetime.fromisoformat alone refuses both
and accepts forms RFC 3339 does not (a bare date, no offset, basic format), so a schema-valid time was refused
and invalid ones taken. No library here does this (jsonschema's check needs rfc3339-validator, not installed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse(value: str) -> datetime:
    """The aware datetime of an RFC 3339 string; ValueError names what is wrong."""
    match = _RFC3339.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z")
    day, minutes, seconds, fraction, offset = match.groups()
    seconds = "59" if seconds == "60" else seconds
    offset = "+00:00" if offset in "Zz" else offset
    parsed = datetime.fromisoformat(f"{day}T{minutes}:{seconds}{(fraction or '')[:7]}{offset}")
    try:
        return parsed.astimezone(UTC)  # PostgreSQL takes offsets up to 15:59 only; RFC 3339 allows 23:59
    except OverflowError:
        raise ValueError(f"{value!r} is outside the years 1 to 9999 in UTC") from None


def format_utc(t: datetime) -> str:
    """RFC 3339 UTC with microseconds, as PostgreSQL's to_char in selectors.grid_cells_json writes it."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The contract's and the schema's guard against that (a time on the first day with a positive offset, or on the
# last day with a negative one): JSON Schema cannot compute the UTC time, a pattern can name those two days.
IN_RANGE_PATTERN = r"^(?!0001-01-01[Tt][^+]*\+|9999-12-31[Tt].*-\d\d:\d\d$)"
