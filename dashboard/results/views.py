"""Pages (grid, pair, comparison, problems; read access as for the API), /healthz and /metrics (always open). Reads go
through selectors."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.http import Http404, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from results import federation, params, selectors, services, thresholds
from results import hosts as hosts_
from results import implementations as implementations_
from results import metrics as metrics_
from results import storage as storage_mode
from results.access import read_access_required
from results.api.serializers import MaintenanceSerializer
from results.diagnosis.limits import LIMITS
from results.loss import selectors as loss
from results.models import ADDRESS_FAMILIES, AUTH_MODES, STORAGE_SETTINGS, Benchmark, Maintenance, Node, Problem, Run
from results.protocols import PROTOCOLS, TPC_PROTOCOLS
from results.stats import changes as change_detection
from results.stats.advice import KNEE_MARGIN, MIN_RUNS, Observation, advise
from results.stats.level import LEVEL_RUNS, recent_level


def healthz(request):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as err:  # noqa: BLE001 - any database failure makes us unhealthy
        return JsonResponse({"status": "error", "database": str(err)}, status=503)
    return JsonResponse({"status": "ok"})


def metrics(request):
    return HttpResponse(generate_latest() + generate_latest(metrics_.PROBLEMS), content_type=CONTENT_TYPE_LATEST)


@read_access_required
def index(request):
    benchmarks = []
    for bench in Benchmark.objects.select_related("cluster"):
        last = Run.objects.filter(benchmark=bench).order_by("-started_at").first()
        benchmarks.append({"bench": bench, "protocols": selectors.benchmark_protocols(bench), "last_run": last})
    return render(request, "results/index.html", {"benchmarks": benchmarks, "nodes": Node.objects.count()})


def _bench_or_404(request, namespace: str, name: str) -> Benchmark:
    """One benchmark: of the cluster in ?cluster=, else the first cluster's that has it."""
    benches = selectors.benchmarks_named(namespace, name, request.GET.get("cluster") or None)
    if not benches:
        raise Http404(f"benchmark {namespace}/{name} not found")
    return benches[0]


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "no value"
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


def _script_json(text: str) -> str:
    """JSON text made safe inside <script> (what Django's json_script does to its encoder's output)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")



def _ext_class(node: dict) -> str:
    """An external endpoint's row and column header are marked (style.css: .ext)."""
    return " ext" if node.get("external") else ""


def _node_title(node: dict) -> str:
    site = html.escape(node.get("site") or "")
    return f"external endpoint at {site}" if node.get("external") else site

# The why view's colour of each binding limit (results/diagnosis/limits.py's LIMITS, in its order): the path is
# green (a cell at its path is healthy), windows blues, loss red, the hosts orange and olive
LIMIT_COLOURS = dict(zip(LIMITS, ("#2e9e44", "#1f77b4", "#17becf", "#d62728", "#ff7f0e", "#bcbd22", "#e377c2",
                                  "#8c564b", "#c49c94", "#7f7f7f"), strict=True))
LIMIT_STYLES = "".join(f".a-{x} {{ --a: {c}; }} .b-{x} {{ --b: {c}; }} " for x, c in LIMIT_COLOURS.items())


def _limit_legend(drawn) -> list[dict]:
    """The why view's legend: each binding limit its drawn cells ran into, in LIMITS' order, with its colour and
    how many cells (each direction a cell)."""
    counts: dict[str, int] = {}
    for state, *_ in drawn:
        counts[state] = counts.get(state, 0) + 1
    return [{"limit": x, "colour": LIMIT_COLOURS[x], "count": counts[x]} for x in LIMITS if x in counts]


def _tuned(benches: list[Benchmark], protocol: str) -> bool:
    """Whether the page's default stream pick is "newest (tuned)": the benchmark's spec as its operator last sent
    it (every batch carries it) asks for optimize: true, and the protocol is one the optimizer tunes (the file
    movers). Nothing is read from the cells: a benchmark tuned now shows each link's newest setting, one that was
    tuned once and no longer is shows its largest stream count again (its newest runs share their settings)."""
    return protocol in TPC_PROTOCOLS and any((b.spec or {}).get("optimize") is True for b in benches)


@read_access_required
def grid_page(request, namespace: str, name: str):
    """One cluster's grid (?cluster=), or every cluster's benchmark of this namespace/name in one grid. One stream
    setting at a time: ?streams= a count (default the largest), or newest, each link's newest cell whatever its
    streams (the default for a tuned benchmark: _tuned)."""
    q = request.GET
    every = selectors.benchmarks_named(namespace, name)
    cluster = q.get("cluster") or None
    benches = [b for b in every if b.cluster.name == cluster] if cluster else every
    if not benches:
        raise Http404(f"benchmark {namespace}/{name} not found" + (f" in cluster {cluster}" if cluster else ""))
    bench = benches[0]
    clusters = {"all": [b.cluster.name for b in every], "shown": cluster}
    combined = len(benches) > 1
    available = _protocols(benches)
    if q.get("view") in loss.VIEWS:  # the loss probes' views need the benchmark's nodes, not its transfers
        return _loss_grid_page(request, bench, clusters, available, q["view"])
    if not available:
        return render(request, "results/grid.html", {"bench": bench, "available": {}, "empty": True,
                                                     "clusters": clusters})
    try:
        default_protocol = next((p for p in available if p not in ("iperf3", "rtt")), next(iter(available)))
        protocol = params.protocol("protocol", q.get("protocol") or default_protocol)
        settings_ = available.get(protocol, [])
        split = params.choice("split", q.get("split"), ("direction", "streams"), "direction")
        sort = params.choice("sort", q.get("sort"), ("name", "site"), "name")
        mode = params.choice("mode", q.get("mode"), selectors.GRID_MODES, "latest")
        window = params.duration("window", q.get("window"), timedelta(days=7))
        # an RTT cell has no limit to colour by: the latency grid is coloured by its thresholds alone
        view = "value" if protocol == "rtt" else params.choice("view", q.get("view"), selectors.GRID_VIEWS, "value")
        tuned = _tuned(benches, protocol)
        high = params.streams("streams", q.get("streams"),
                              selectors.NEWEST if tuned else max(settings_, default=0))
        low = params.integer("low", q.get("low"), min(settings_, default=0), 0, 100)
        # one address family and one congestion control at a time: each is a grid of its own, like a stream count
        kinds = selectors.cell_settings(bench, protocol)
        families, ccs = kinds["address_family"], kinds["congestion_control"]
        family = params.choice("address_family", q.get("address_family"), tuple(ADDRESS_FAMILIES),
                               "ipv4" if "ipv4" in families or not families else families[0])
        asked = params.congestion_control("congestion_control", q.get("congestion_control"))
        cc = asked if asked is not None else (ccs[0] if ccs else "")
        # and one auth mode: the newest unless asked (a benchmark whose spec.auth changed shows its current one);
        # the select offers the modes its cells have ("" is none: a protocol without modes, or older records)
        auth = (params.choice("auth", q.get("auth"), tuple(AUTH_MODES), "")
                or selectors.newest_auth(benches, protocol))
        auths = [a for a in AUTH_MODES if a in kinds["auth"]]
        # and one storage setting (disk mode, #28): memory to memory unless asked or the only one measured
        storages = kinds["storage"]
        storage = params.choice("storage", q.get("storage"), tuple(STORAGE_SETTINGS),
                                "memory" if "memory" in storages or not storages else storages[0])
    except params.ParamError as err:
        return HttpResponseBadRequest(str(err))
    newest = high == selectors.NEWEST
    if split == "streams" and (low == high or newest):  # newest: a link's own streams, no second setting to show
        split = "direction"
    wanted = high if split == "direction" else None
    lean = mode == "latest" and connection.vendor == "postgresql" and not combined and view == "value"
    if combined:
        data = federation.combined_grid(benches, protocol, streams=wanted, mode=mode, window=window,
                                        address_family=family, congestion_control=cc, auth=auth, storage=storage)
    else:
        data = selectors.grid(bench, protocol, streams=wanted, mode=mode, window=window, with_cells=not lean,
                              address_family=family, congestion_control=cc, auth=auth, storage=storage)
    kind, unit, bounds = data["kind"], data["unit"], data["thresholds"]
    nodes = data["nodes"]
    if sort == "site":
        nodes = sorted(nodes, key=lambda n: (n["site"] or "~", n["name"]))
    now = data["generated_at"]
    # each cell's half (state, stale, tooltip JSON) once; a cell is drawn twice (each direction's upper half)
    efficiency_bounds = data["efficiency_thresholds"]
    drawn: dict[tuple[str, str, int | str], tuple] = (
        selectors.drawn_cells(None if lean else data, bench, protocol, wanted, now, family, cc, auth, storage)
        if view == "value" else selectors.diagnosed_cells(data, wanted, view, efficiency_bounds))
    limits = _limit_legend(v for k, v in drawn.items() if k[2] in (high, low)) if view == "why" else []

    header, body, tips = _table(nodes, drawn, high, low, split, kind, bounds, combined, storage)
    halves = (
        ("source → destination", "destination → source") if split == "direction"
        else (f"{high} streams", f"{low} streams")
    )
    # a combined grid names nodes cluster:node, which the pair page reads without a benchmark; the pair page's plot
    # opens on the grid's protocol (a registry name: nothing to escape)
    pair_query = (f"?protocol={protocol}" if combined else
                  f"?benchmark={bench.namespace}/{bench.name}&cluster={bench.cluster.name}&protocol={protocol}")
    context = {
        "bench": bench,
        "clusters": clusters,
        "open_problems": Problem.objects.filter(benchmark__in=benches, resolved_at__isnull=True).count(),
        "available": available,
        "protocol": protocol,
        "kind": kind,
        "unit": unit,
        "thresholds": bounds,
        "view": view,
        "efficiency_thresholds": {k: v * 100 for k, v in efficiency_bounds.items()},
        "limit_legend": limits,
        "limit_styles": mark_safe(LIMIT_STYLES),  # noqa: S308 - limit names and colours of our own
        "split": split,
        "sort": sort,
        "mode": mode,
        "window": q.get("window") or "7d",
        "high": high,
        "low": low,
        # the streams select: every count, and newest for a tuned benchmark or a protocol of several counts
        "stream_choices": settings_,
        "offer_newest": tuned or newest or len(settings_) > 1,
        "newest": newest,
        "families": families,
        "family": family,
        "ccs": ccs,
        "cc": cc,
        "auths": auths,
        "auth": auth,
        "storages": storages,
        "storage": storage,
        "halves": halves,
        "loss_views": list(loss.VIEWS),
        "now": now,
        "node_count": len(nodes),
        **_table_context(header, body, tips, unit, now, split, high, low,
                         reverse("pair", args=["SRC", "DST"]) + pair_query, view),
    }
    return render(request, "results/grid.html", context)


# (source, destination, streams) -> a half: (state, stale, tooltip JSON[, figure drawn in the cell])
Drawn = dict[tuple[str, str, int | str], tuple]


def _loss_drawn(cells: list[dict], field: str, bounds: dict[str, float]) -> Drawn:
    """The loss views' halves by (source, destination, 0): a directed pair's value of ``field`` with the newest
    period's epoch; a one-way delay the window does not trust is no number but "untrusted" and its reason."""
    out: Drawn = {}
    for c in cells:
        value = c[field]
        newest = datetime.fromisoformat(c["newest"].replace("Z", "+00:00"))
        info: list = [None if value is None else round(value, 4), int(newest.timestamp())]
        if field == "forward_ms" and not c["one_way_trusted"]:
            info += ["untrusted", c["one_way_reason"]]
        state = thresholds.classify(value, None, "latency", bounds)  # lower is better, as for RTT
        out[(c["source"], c["destination"], 0)] = (state, False, json.dumps(info))
    return out


def _loss_grid_page(request, bench: Benchmark, clusters: dict, available: dict, view: str):
    """The loss mesh's views of a benchmark's nodes (results.loss.selectors): loss %, one-way delay (each half
    the delay in its direction) or jitter over a window, drawn by the same table as the transfer grids."""
    q = request.GET
    try:
        family = int(params.choice("family", q.get("family"), ("4", "6"), "4"))
        window = params.duration("window", q.get("window"), loss.DEFAULT_WINDOW) if q.get("window") else None
        sort = params.choice("sort", q.get("sort"), ("name", "site"), "name")
    except params.ParamError as err:
        return HttpResponseBadRequest(str(err))
    data = loss.grid(bench, family, window)
    field, unit = loss.VIEWS[view]
    bounds = loss.view_bounds(view, bench)
    cells = json.loads(data["cells_json"])
    drawn = _loss_drawn(cells, field, bounds)
    nodes = [{"name": n.name, "site": n.site, "cluster": n.cluster.name, "loopback_gbps": None, "external": False}
             for n in selectors.benchmark_nodes(bench)]
    if sort == "site":
        nodes = sorted(nodes, key=lambda n: (n["site"] or "~", n["name"]))
    header, body, tips = _table(nodes, drawn, 0, 0, "direction", "latency", bounds, False)
    pair_url = (reverse("pair", args=["SRC", "DST"])
                + f"?benchmark={bench.namespace}/{bench.name}&cluster={bench.cluster.name}")
    context = {
        "bench": bench, "clusters": clusters, "available": available, "loss_view": view, "view": "value",
        "loss_views": list(loss.VIEWS),
        "open_problems": Problem.objects.filter(benchmark=bench, resolved_at__isnull=True).count(),
        "kind": "latency", "unit": unit, "thresholds": bounds, "sort": sort, "window": q.get("window") or "15m",
        "family": family, "families": loss.FAMILIES, "pairs": len(cells),
        "halves": ("source → destination", "destination → source"), "node_count": len(nodes),
        **_table_context(header, body, tips, unit, data["generated_at"], "direction", 0, 0, pair_url),
    }
    return render(request, "results/grid.html", context)


def _table(nodes: list[dict], drawn: Drawn, high: int | str, low: int, split: str, kind: str, bounds: dict,
           combined: bool, storage: str = "memory") -> tuple[str, str, list[str]]:
    """The grid's table (header, body) and its tooltip rows: every view draws its cells here. A cell is two
    halves, each (state, stale, tooltip JSON) from ``drawn``: the pair's two directions, or two stream settings.
    The diagonal shows each node's own ceilings under the ``storage`` setting (results.storage.diagonal): the
    loopback in memory mode, the disk read (upper-left half) and write (lower-right) ceilings in disk mode."""
    missing = ("none", False, None)
    rows_html = []
    tip_rows = []
    for r in nodes:
        src = r["name"]
        tds = []
        tip_row = []
        for col in nodes:
            dst = col["name"]
            if src == dst:
                ceilings = storage_mode.diagonal(r, storage) if kind == "throughput" else {}
                if not ceilings:
                    tds.append('<td class="diag"></td>')
                    tip_row.append("null")
                else:
                    a_cls, b_cls = (thresholds.classify(v, "succeeded", kind, bounds)
                                    for v in (next(iter(ceilings.values())), list(ceilings.values())[-1]))
                    tds.append(f'<td class="diag a-{a_cls} b-{b_cls}"></td>')
                    tip_row.append(json.dumps({"ceilings": ceilings}))
                continue
            a = drawn.get((src, dst, high), missing)
            b = drawn.get((dst, src, high) if split == "direction" else (src, dst, low), missing)
            classes = f"a-{a[0]} b-{b[0]}" + (" sa" if a[1] else "") + (" sb" if b[1] else "")
            figure = a[3] if len(a) > 3 else ""  # the efficiency (%) of the upper-left half, in its views
            tds.append(f'<td class="{classes}">{figure}</td>')
            tip_row.append(f"[{a[2] or 'null'},{b[2] or 'null'}]" if (a[2] or b[2]) else "null")
        site = f'external endpoint at {r["site"]}' if r.get("external") else r["site"]
        title = " · ".join(x for x in (site, f'cluster {r["cluster"]}' if combined else "") if x)
        rows_html.append(
            f'<tr><th class="rh{_ext_class(r)}" data-n="{html.escape(src)}" title="{html.escape(title)}">'
            f'{html.escape(src)}</th>{"".join(tds)}</tr>'
        )
        tip_rows.append(f"[{','.join(tip_row)}]")
    header = "".join(
        f'<th class="ch{_ext_class(n)}" data-n="{html.escape(n["name"])}" title="{_node_title(n)}">'
        f'<span>{html.escape(n["name"])}</span></th>' for n in nodes
    )
    return header, "\n".join(rows_html), tip_rows


def _table_context(header: str, body: str, tip_rows: list[str], unit: str, now: datetime, split: str,
                   high: int | str, low: int, pair_url: str, view: str = "value") -> dict:
    return {
        "table_head": mark_safe(header),  # noqa: S308 - names escaped in _table
        "table_body": mark_safe(body),  # noqa: S308
        # the tooltips' data, joined from JSON texts (no encoding of 10 000 small lists); escaped like json_script
        "tips": mark_safe(_script_json(  # noqa: S308
            json.dumps({"unit": unit, "now": int(now.timestamp()), "split": split, "high": high, "low": low,
                        "view": view, "pair_url": pair_url,
                        "cells": None})[:-len("null}")] + f"[{','.join(tip_rows)}]}}")),
    }


def _node_or_404(ref: str, cluster: str | None) -> Node:
    """A node by name, cluster:node, or by name in ?cluster= (the benchmark's cluster: a node of another cluster
    in a cross-cluster pair is found by name alone when unique)."""
    for where in ([cluster, None] if cluster else [None]):
        try:
            return selectors.get_node(ref, where)
        except Node.DoesNotExist:
            continue
        except Node.MultipleObjectsReturned:
            raise Http404(f"node {ref} is in several clusters: name it cluster:node") from None
    raise Http404(f"node {ref} not found")


def _protocols(benches: list[Benchmark]) -> dict[str, list[int]]:
    """The protocols and stream settings of several benchmarks together."""
    out: dict[str, set[int]] = {}
    for bench in benches:
        for protocol, streams in selectors.benchmark_protocols(bench).items():
            out.setdefault(protocol, set()).update(streams)
    return {p: sorted(v) for p, v in sorted(out.items())}


NEWEST_ROWS = 20  # the pair page's newest transfers, each with the versions that made it


@read_access_required
def pair_page(request, source: str, destination: str):
    cluster = request.GET.get("cluster") or None
    a, b = _node_or_404(source, cluster), _node_or_404(destination, cluster)
    bench = None
    if request.GET.get("benchmark"):
        try:
            bench = selectors.get_benchmark(request.GET["benchmark"], cluster)
        except (Benchmark.DoesNotExist, Benchmark.MultipleObjectsReturned):
            raise Http404("benchmark not found") from None
    try:
        since = params.duration("since", request.GET.get("since"), timedelta(days=90))
    except params.ParamError as err:
        return HttpResponseBadRequest(str(err))
    history = selectors.pair_history(a, b, bench, since=timezone.now() - since)
    series: dict[str, list] = {}
    implementations: dict[str, list] = {}  # per series, each point's implementation (None: not recorded)
    rtt: dict[str, list] = {}
    retransmits: dict[str, list] = {}
    transfers: list[dict] = []  # every transfer, with what changed in its implementation since the cell's last run
    known: dict[str, dict] = {}  # per series, the newest implementation recorded so far
    newest: dict[str, dict] = {}  # per series, its newest transfer (the Why table's row)
    protocol_of: dict[str, str] = {}  # per series, its protocol (the plot draws one protocol at a time)
    for p in history:
        t = int(p["finished_at"].timestamp() * 1000)
        # IPv6 is a setting of its own too: its series are named so (IPv4 ones as before IPv6)
        family = " IPv6" if p["address_family"] == "ipv6" else ""
        direction = f'{p["source"]} → {p["destination"]}{family}'
        if p["protocol"] == "rtt":
            if p["rtt_ms"] is not None:
                rtt.setdefault(f"RTT {direction}", []).append([t, p["rtt_ms"]])
            continue
        # a congestion control the test asked for is a setting of its own, like streams: a series of its own
        cc = f' {p["congestion_control"]}' if p["congestion_control"] else ""
        # and so is the auth mode (#13): x509 and token runs of a pair are two series, not a step between them
        auth = f' {p["auth"]}' if p["auth"] else ""
        # and so is the storage (disk mode, #28): a disk run is not a step in the memory series
        store = f' {p["storage"]}' if p["storage"] != "memory" else ""
        label = f'{p["protocol"]} ×{p["streams"] or 1}{cc}{auth}{store} {direction}'
        if p["retransmits"] is not None:  # the senders' TCP retransmits, where the mover saw them
            retransmits.setdefault(label, []).append([t, p["retransmits"]])
        newest[label] = {**p, "series": label}
        protocol_of[label] = p["protocol"]
        impl = p["implementation"]
        transfers.append({**p, "series": label, "version": implementations_.label(impl),
                          "version_change": implementations_.change(known.get(label), impl)})
        if impl:
            known[label] = impl
        if p["throughput_gbps"] is None:
            continue
        series.setdefault(label, []).append([t, round(p["throughput_gbps"], 3)])
        implementations.setdefault(label, []).append(impl)
    files = selectors.pair_latest_run_files(a, b, bench)
    groups = files["groups"] if files else []
    changes, levels, recent = _steps(series, implementations)
    paths = selectors.pair_paths(a, b, bench, since=timezone.now() - since)
    # the protocols with a throughput to draw, in the registry's order; the plot opens on ?protocol= or the first
    drawn = sorted({protocol_of[label] for label in series}, key=_protocol_order)
    plot = {
        "protocols": drawn,
        "protocol": request.GET.get("protocol") if request.GET.get("protocol") in drawn else next(iter(drawn), None),
        "series": protocol_of,
        "throughput": series,
        "levels": levels,
        "rtt": rtt,
        "retransmits": retransmits,
        # path changes (results.paths) as marks on the time axis: [t, label]
        "paths": [[int(p.at.timestamp() * 1000), f"{p.source} → {p.destination}: path changed"]
                  for p in paths if p.changed],
        # The latest run's per-file seconds: a strip of points per direction and setting, with the median.
        "files": [{"label": [f'{g["source"]} → {g["destination"]}', g["setting"]],
                   "points": [[f["seconds"], f["name"]] for f in g["files"]], "median": g["summary"]["median"]}
                  for g in groups],
    }
    plot.update(_loss_plot(a, b, since))
    context = {
        "a": a, "b": b, "bench": bench, "plot": plot, "points": len(history), "files": files,
        "why": _why(newest),
        "newest": _with_telemetry(transfers[::-1][:NEWEST_ROWS]),
        "errors": selectors.pair_errors(a, b, bench), "changes": changes, "recent": recent, "paths": paths,
        "repeated": selectors.pair_repeated_cells(a, b, bench),
        "storage_tax": selectors.pair_storage_tax(a, b, bench),
        "advice": _advice(history), "advice_terms": {"runs": LEVEL_RUNS, "min_runs": MIN_RUNS,
                                                     "margin": f"{KNEE_MARGIN:.0%}"},
        "reverse_url": reverse("pair", args=[b.name, a.name]) + (f"?benchmark={bench}" if bench else ""),
    }
    return render(request, "results/pair.html", context)


LOSS_PLOT_SPAN = timedelta(days=2)  # the pair page's loss plot: ~2 880 one-minute periods per direction at most


def _loss_plot(a: Node, b: Node, since: timedelta) -> dict:
    """The pair's loss summaries over the shown history (at most LOSS_PLOT_SPAN): each period's loss % and RTT
    median per direction and address family, for the loss plot (results.loss.selectors.pair_history)."""
    rows = loss.pair_history(a, b, timezone.now() - min(since, LOSS_PLOT_SPAN))
    out: dict[str, dict[str, list]] = {"loss": {}, "loss_rtt": {}}
    for s in rows:
        t = int(s.period_start.timestamp() * 1000)
        label = f"{s.source.name} → {s.destination.name}" + (" IPv6" if s.family == 6 else "")
        out["loss"].setdefault(label, []).append([t, round(100 * s.lost / s.sent, 4) if s.sent else None])
        if s.rtt_median_ms is not None:
            out["loss_rtt"].setdefault(f"RTT {label}", []).append([t, round(s.rtt_median_ms, 3)])
    return out


def _protocol_order(protocol: str) -> tuple[int, str]:
    """The registry's order (results.protocols), a protocol it does not name after them."""
    return (PROTOCOLS.index(protocol) if protocol in PROTOCOLS else len(PROTOCOLS), protocol)


def _why(newest: dict[str, dict]) -> list[dict]:
    """Each setting's newest transfer with the limit model's answer on it (results.diagnosis): its binding limit,
    efficiency and fix; for an unknown limit the figures that were missing. Rows by protocol (the registry's order)."""
    found = selectors.measurement_diagnoses([p["id"] for p in newest.values()])
    rows = []
    for label, p in sorted(newest.items(), key=lambda item: (_protocol_order(item[1]["protocol"]), item[0])):
        got = found.get(p["id"], {})
        diagnosis = got.get("diagnosis") or {}
        rows.append({"series": label, "protocol": p["protocol"], "finished_at": p["finished_at"],
                     "throughput_gbps": p["throughput_gbps"], "status": p["status"],
                     "limit": got.get("binding_limit") or None,
                     "efficiency": None if got.get("efficiency") is None else got["efficiency"] * 100,
                     "fix": diagnosis.get("fix") or None, "reason": diagnosis.get("reason") or "",
                     "missing": diagnosis.get("missing") or []})
    return rows


def _with_telemetry(rows: list[dict]) -> list[dict]:
    """The newest rows, each with both ends' host telemetry and why its sender waited (results.hosts)."""
    found = selectors.measurement_telemetry([r["id"] for r in rows])
    return [{**r, "host": hosts_.view(found.get(r["id"], {}).get("host"), found.get(r["id"], {}).get("tcp"))}
            for r in rows]


def _advice(history: list[dict]) -> list[dict]:
    """Per protocol and direction with transfers in the shown history: each setting's level, the best and the
    knee (stats.advice; a failed run counts as 0 Gbit/s; memory to memory only, as the advice API), as the page's
    tables show them."""
    links: dict[tuple[str, str, str], list[Observation]] = {}
    for p in history:
        seen = Observation.of(p["streams"], p["concurrency"], p["throughput_gbps"], p["status"])
        if p["protocol"] != "rtt" and p["storage"] == "memory" and seen is not None:
            links.setdefault((p["protocol"], p["source"], p["destination"]), []).append(seen)
    out = []
    for (protocol, source, destination), observations in sorted(links.items()):
        found = advise(observations)
        rows = [{"level": lv, "marks": [m for m, s in (("best", found.best), ("knee", found.knee)) if s == lv.setting]}
                for lv in found.settings]
        out.append({"protocol": protocol, "direction": f"{source} → {destination}", "rows": rows,
                    "reason": found.reason})
    return out


def _steps(series: dict[str, list], implementations: dict[str, list] | None = None
           ) -> tuple[list[dict], dict[str, list], list[dict]]:
    """Step changes in each throughput series of the pair page (stats.changes, over the shown history), the
    levels between them as [[t, median], [t, median], null, ...] line segments for the plot, and each series'
    recent level (since its last step) with a 95 % interval. A step whose first run was made by another version
    than the run before it (``implementations``: each point's, parallel to ``series``) says so (version_change):
    the step may be the software's, not the network's."""
    implementations = implementations or {}
    found, levels, recent = [], {}, []
    for label, points in series.items():
        values = [v for _, v in points]
        if len(values) < 2 * change_detection.MIN_RUNS or min(values) <= 0:
            continue
        steps = change_detection.detect(values)
        level = recent_level(values, since=steps[-1].index if steps else 0)
        if level is not None:
            recent.append({"series": label, "level": level})
        line: list = []
        for first, last, median in change_detection.levels(values, steps):
            line += [[points[first][0], median], [points[last][0], median], None]
        levels[label] = line[:-1]
        impls = implementations.get(label) or [None] * len(points)
        for c in steps:
            before = next((i for i in reversed(impls[:c.index]) if i), None)
            found.append({"series": label, "at": datetime.fromtimestamp(points[c.index][0] / 1000, UTC),
                          "before": c.before, "after": c.after, "percent": (c.ratio - 1) * 100,
                          "version_change": implementations_.change(before, impls[c.index])})
    return sorted(found, key=lambda c: c["at"], reverse=True), levels, recent


AUTH_DAYS = 30  # the comparison page's auth modes: a mean over this many days per pair and mode


@read_access_required
def compare_page(request, namespace: str, name: str):
    bench = _bench_or_404(request, namespace, name)
    try:
        low = params.integer("low", request.GET.get("low"), 1, 1, 100)
        high = params.integer("high", request.GET.get("high"), 8, 1, 100)
        days = params.integer("days", request.GET.get("days"), AUTH_DAYS, 1, 365)
    except params.ParamError as err:
        return HttpResponseBadRequest(str(err))
    auth = selectors.auth_pairs(bench, timezone.now() - timedelta(days=days))
    plot = {
        "rtt": selectors.throughput_vs_rtt(bench),
        "streams": selectors.streams_pairs(bench, None, low, high),
        "low": low, "high": high,
        "auth": auth,
    }
    return render(request, "results/compare.html", {"bench": bench, "plot": plot, "low": low, "high": high,
                                                    "days": days, "auth_summary": selectors.auth_summary(auth),
                                                    "json": json})


def _act(request, bench: Benchmark) -> str | None:
    """The problems page's forms (signed-in users with the permission): acknowledge or take back, set or end a
    maintenance window. Returns an error to show, or None."""
    user, action = request.user, request.POST.get("action", "")
    if not user.is_authenticated:
        return "Sign in to act on problems and maintenance."
    need = {"ack": "results.change_problem", "unack": "results.change_problem",
            "maintain": "results.add_maintenance", "end": "results.delete_maintenance"}.get(action)
    if need is None:
        return f"Unknown action {action!r}."
    if not user.has_perm(need):
        return f"You lack the permission {need} (an admin grants it in the Django admin)."
    if action in ("ack", "unack"):
        problem = get_object_or_404(Problem, pk=request.POST.get("problem") or 0, benchmark=bench)
        note = (request.POST.get("note") or "").replace("\x00", "\ufffd")[:1000]
        services.acknowledge(problem, user.get_username(), note if action == "ack" else None)
        return None
    if action == "end":
        services.end_maintenance(get_object_or_404(Maintenance, pk=request.POST.get("window") or 0))
        return None
    form = MaintenanceSerializer(data={k: request.POST.get(k) or None for k in ("node", "source", "destination",
                                                                                   "reason", "ends_at")})
    if not form.is_valid():
        return "; ".join(f"{field}: {' '.join(map(str, errs))}" for field, errs in form.errors.items())
    services.maintenance_changed(form.save(created_by=user.get_username()))
    return None


PROBLEMS_SHOWN = 200


@read_access_required
def problems_page(request, namespace: str, name: str):
    """A benchmark's problems (open first, acknowledged ones greyed), its maintenance windows and recent step
    changes; signed-in users with the permission acknowledge and set maintenance here."""
    bench = _bench_or_404(request, namespace, name)
    error = None
    if request.method == "POST":
        error = _act(request, bench)
        if error is None:
            return redirect(request.path)
    now = timezone.now()
    open_all = bench.problems.filter(resolved_at__isnull=True)
    open_count = open_all.count()
    # the most severe and newest first; a page of thousands helps nobody (the API pages through all of them)
    open_problems = list(open_all.order_by("severity", "-first_seen", "id")[:PROBLEMS_SHOWN])
    resolved = list(bench.problems.filter(resolved_at__gte=now - timedelta(days=7)).order_by("-resolved_at")[:20])
    node_ids = bench.nodes.values_list("id", flat=True)
    windows = (Maintenance.objects.filter(ends_at__gt=now)
               .filter(Q(node__in=node_ids) | Q(source__in=node_ids) | Q(destination__in=node_ids))
               .select_related("node", "source", "destination").order_by("starts_at"))
    recent = (bench.changes.select_related("source", "destination").order_by("-at")[:20])
    perms = request.user.get_all_permissions() if request.user.is_authenticated else set()
    return render(request, "results/problems.html", {
        "bench": bench, "open_problems": open_problems, "open_count": open_count, "resolved": resolved,
        "windows": windows, "changes": recent, "nodes": bench.nodes.order_by("name"), "now": now, "error": error,
        "can_ack": "results.change_problem" in perms, "can_maintain": "results.add_maintenance" in perms,
        "can_end": "results.delete_maintenance" in perms,
        "default_end": (now + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }, status=400 if error else 200)
