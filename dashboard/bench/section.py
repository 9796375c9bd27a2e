"""What the dashboard's benchmark scripts do with their figures: print them, write them into BENCHMARKS.md between
<!-- NAME:start --> and <!-- NAME:end --> (not with --no-write), and exit non-zero when a goal is missed."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "dashboard")]

from tpcmesh_lab.bench import write_section  # noqa: E402


def publish(name: str, body: str, ok: bool) -> int:
    print(body)
    if "--no-write" not in sys.argv:
        write_section(REPO / "BENCHMARKS.md", name, body)
    return 0 if ok else 1
