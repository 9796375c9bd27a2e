"""The chart's Grafana dashboards as the tests read them: hack/grafana.py (the generator) loaded as a module, the
committed JSON files, and each panel's queries (panels inside rows included)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

from tests.support.paths import REPO

DASHBOARDS = REPO / "charts" / "tpcmesh" / "dashboards"


def generator() -> ModuleType:
    """hack/grafana.py, imported (it is a script, not a package)."""
    name = "hack_grafana"
    if name not in sys.modules:
        sys.path.insert(0, str(REPO / "hack"))  # as when run: its sibling hack/generated.py is importable
        spec = importlib.util.spec_from_file_location(name, REPO / "hack" / "grafana.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def committed() -> dict[str, dict]:
    """uid -> the committed dashboard JSON."""
    boards = [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]
    return {b["uid"]: b for b in boards}


@dataclass(frozen=True)
class Target:
    dashboard: str  # uid
    panel: str  # title
    ref: str
    expr: str
    instant: bool

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}"


def panels(board: dict) -> Iterator[dict]:
    """Every panel but rows, including those inside a (collapsed) row."""
    for p in board.get("panels", []):
        if p.get("type") == "row":
            yield from p.get("panels", [])
        else:
            yield p


def targets(board: dict) -> list[Target]:
    return [Target(board["uid"], p["title"], t["refId"], t["expr"], bool(t.get("instant")))
            for p in panels(board) for t in p.get("targets", [])]


def variables(board: dict) -> list[dict]:
    return list(board.get("templating", {}).get("list", []))
