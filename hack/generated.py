"""What the generators in hack/ share: bring the files they make up to date, or (--check) name each one that drifted.

Imported by hack/protocols.py and hack/grafana.py, which are run as scripts (hack/ is then on the import path)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

P = TypeVar("P", str, Path)  # the generators name their files by str or by Path


def sync(root: Path, wanted: Mapping[P, str], *, check: bool, made_by: str, remake: str,
         stale: Sequence[P] = (), stale_is: str = "no file") -> int:
    """Write each file of ``wanted`` (path relative to ``root`` -> text) that differs, and remove each ``stale`` one
    (a file the generator no longer makes); with ``check``, change nothing and exit 1 naming each of them."""
    drifted = {p: text for p, text in wanted.items() if not (root / p).is_file() or (root / p).read_text() != text}
    if check:
        for p in drifted:
            print(f"{p} is not what {made_by} makes: run `{remake}`", file=sys.stderr)
        for p in stale:
            print(f"{p} is {stale_is} {made_by} makes: run `{remake}`", file=sys.stderr)
        return 1 if drifted or stale else 0
    for p in stale:
        (root / p).unlink()
        print(f"removed {p}")
    for p, text in drifted.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text(text)
        print(f"wrote {p}")
    return 0
