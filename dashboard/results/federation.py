"""The combined grid of several clusters' benchmarks of one namespace/name: every cluster's nodes in one grid,
named "cluster:node" (selectors.get_node reads that back), cross-cluster pairs included (a benchmark whose
measurements name another cluster's node). Each cluster's cells are classified by its own benchmark's thresholds;
a cell two clusters both measured shows the newer measurement (with streams=newest a link is one cell whatever
its streams: the newer of the clusters' newest cells)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from results import selectors
from results.models import Benchmark


def qualified(cluster: str, node: str) -> str:
    return f"{cluster}{selectors.CLUSTER_SEPARATOR}{node}"


def combined_grid(benches: list[Benchmark], protocol: str, streams: int | str | None = None, mode: str = "latest",
                  window: timedelta = timedelta(days=7), now: datetime | None = None,
                  address_family: str | None = None, congestion_control: str | None = None,
                  auth: str | None = None, binding_limits: tuple[str, ...] | None = None,
                  storage: str | None = None) -> dict[str, Any]:
    """selectors.grid's answer for several benchmarks at once (cells as a list: no database-built JSON). A cell
    is a pair under one setting (streams, address family, congestion control, auth mode, storage), as in one
    grid."""
    now = now or timezone.now()
    parts = [(b, selectors.grid(b, protocol, streams=streams, mode=mode, window=window, now=now,
                                address_family=address_family, congestion_control=congestion_control, auth=auth,
                                binding_limits=binding_limits, storage=storage))
             for b in benches]
    nodes: dict[str, dict[str, Any]] = {}
    newest = streams == selectors.NEWEST
    cells: dict[tuple[str, str, int | None, str, str, str, str], dict[str, Any]] = {}
    for _bench, part in parts:
        # a benchmark's nodes have distinct names (its cells name them so), whatever cluster each is of
        name = {n["name"]: qualified(n["cluster"], n["name"]) for n in part["nodes"]}
        for n in part["nodes"]:
            nodes.setdefault(name[n["name"]], {**n, "name": name[n["name"]]})
        for c in part["cells"]:
            key = (name[c["source"]], name[c["destination"]], None if newest else c["streams"],
                   c["address_family"], c["congestion_control"], c["auth"], c["storage"])
            if key not in cells or (c["finished_at"], c["streams"]) > (cells[key]["finished_at"],
                                                                         cells[key]["streams"]):
                cells[key] = {**c, "source": key[0], "destination": key[1]}
    first = parts[0][1]
    return {**first, "clusters": sorted({b.cluster.name for b in benches}),
            "nodes": sorted(nodes.values(), key=lambda n: n["name"]), "cells": list(cells.values())}
