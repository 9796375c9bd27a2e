"""The benches' reports: a section of BENCHMARKS.md each, between ``<!-- <name>:start -->`` and ``<!-- <name>:end -->``
markers, stamped with the minute it was measured."""

from __future__ import annotations

import datetime as dt
from pathlib import Path


def utc_minute() -> str:
    """Now, as the sections say when they were measured: ``2026-01-31 12:34 UTC``."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_section(path: Path, name: str, body: str) -> None:
    """Replace the text between the section's markers (append the section when the file lacks it)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    section = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")
