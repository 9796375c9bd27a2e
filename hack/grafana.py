#!/usr/bin/env python3
"""Write the Grafana dashboards (charts/tpcmesh/dashboards/*.json) with Grafana's own SDK (grafana-foundation-sdk).

    hack/grafana.py            write what drifted (run by `make grafana` and `make chart`)
    hack/grafana.py --check    exit 1 naming each file that is not what this script makes
    hack/grafana.py --root DIR the same on another copy of the repository

The chart ships the files as one ConfigMap labelled for Grafana's dashboard sidecar
(templates/grafana-dashboards-configmap.yaml); each file also imports by hand. Every query reads a metric the product
exports (agent/tpcmesh_agent/metrics.py, operator/tpcmesh_operator/metrics.py, dashboard/results/metrics.py) or
Prometheus' own `up`; tests/integration/test_grafana.py asks a real Prometheus scraping a real lab for each of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from generated import sync
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

REPO = Path(__file__).resolve().parent.parent
OUT = Path("charts/tpcmesh/dashboards")
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "tpcmesh"

THROUGHPUT = "tpcmesh_operator_last_throughput_bits_per_second"
RTT = "tpcmesh_operator_last_rtt_seconds"
LOOPBACK = "tpcmesh_operator_loopback_bits_per_second"
PROBLEMS = "tpcmesh_dashboard_problems"

# Prometheus' table answers carry these besides a series' own labels: the tables leave them out
NOT_SHOWN = ["Time", "__name__", "job", "instance", "container", "endpoint", "namespace", "pod", "service"]


# --- pieces ---------------------------------------------------------------------------------------------------------

def query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False, as_table: bool = False
          ) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    if as_table:
        q = q.format(PromQueryFormat.TABLE)
    return q


def datasource_variable() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Data source").type("prometheus")


def variable(name: str, label: str, metric: str, label_name: str, *, everything: bool = False) -> dash.QueryVariable:
    """A variable of a label's values (`label_values(metric, label)`, Grafana's Prometheus syntax); with `everything`
    it takes several values and offers All (the regex `.*`)."""
    v = (dash.QueryVariable(name).label(label).datasource(DS).query(f"label_values({metric}, {label_name})")
         .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.ALPHABETICAL_ASC))
    if everything:
        v = v.multi(True).include_all(True).all_value(".*")
    return v


def board(uid: str, title: str, description: str) -> dash.Dashboard:
    return (dash.Dashboard(title).uid(uid).description(description).tags([TAG]).editable()
            .time("now-24h", "now").refresh("1m").timezone("browser").tooltip(model.DashboardCursorSync.CROSSHAIR)
            .link(dash.DashboardLink("tpcmesh").type(model.DashboardLinkType.DASHBOARDS).tags([TAG])
                  .as_dropdown(True).include_vars(False).keep_time(True))
            .with_variable(datasource_variable()))


def series(title: str, unit: str, *queries: prometheus.Dataquery, description: str = "", width: int = 12,
           height: int = 8) -> timeseries.Panel:
    p = timeseries.Panel().title(title).unit(unit).datasource(DS).span(width).height(height)
    if description:
        p = p.description(description)
    for q in queries:
        p = p.with_target(q)
    return p


def big(title: str, unit: str, *queries: prometheus.Dataquery, description: str = "", width: int = 4,
        no_value: str | None = None) -> stat.Panel:
    p = stat.Panel().title(title).unit(unit).datasource(DS).span(width).height(4)
    if description:
        p = p.description(description)
    if no_value is not None:
        p = p.no_value(no_value)
    for q in queries:
        p = p.with_target(q)
    return p


def listing(title: str, q: prometheus.Dataquery, unit: str, value: str, description: str = "", width: int = 24,
            height: int = 9) -> table.Panel:
    organize = model.DataTransformerConfig(
        id_val="organize", options={"excludeByName": dict.fromkeys(NOT_SHOWN, True), "renameByName": {"Value": value}})
    p = (table.Panel().title(title).unit(unit).datasource(DS).span(width).height(height).with_target(q)
         .with_transformation(organize))
    return p.description(description) if description else p


# --- the dashboards -------------------------------------------------------------------------------------------------

def overview() -> dash.Dashboard:
    sel = '{protocol=~"$protocol"}'
    d = (board("tpcmesh-overview", "tpcmesh / Mesh overview",
               "Every pair's latest throughput and RTT as the operator measured them, each node's loopback ceiling, "
               "and the problems the dashboard found in the grids.")
         .with_variable(variable("protocol", "Protocol", THROUGHPUT, "protocol", everything=True)))
    d = (d.with_panel(big("Nodes measured", "short", query(f"count(count by (source) ({THROUGHPUT}{sel}))",
                                                           instant=True)))
         .with_panel(big("Pairs measured", "short",
                         query(f"count(count by (source, destination) ({THROUGHPUT}{sel}))", instant=True)))
         .with_panel(big("Slowest pair", "bps", query(f"min({THROUGHPUT}{sel})", instant=True),
                         description="The lowest latest throughput of any pair, protocol and streams setting."))
         .with_panel(big("Median pair", "bps", query(f"quantile(0.5, {THROUGHPUT}{sel})", instant=True)))
         .with_panel(big("Unacknowledged problems", "short",
                         query(f'sum({PROBLEMS}{{acknowledged="false"}})', instant=True), no_value="0",
                         description="Open problems nobody has acknowledged on the dashboard's problems page."))
         .with_panel(big("Measurements waiting for the dashboard", "short",
                         query("sum(tpcmesh_operator_undelivered_measurements)", instant=True))))
    d = (d.with_row(dash.Row("Pairs"))
         .with_panel(listing("Latest throughput per pair",
                             query(f"{THROUGHPUT}{sel}", instant=True, as_table=True), "bps", "throughput",
                             "The newest measurement of each pair, protocol and streams (the 003 paper's "
                             "throughput: bytes over the mean single-file time)."))
         .with_panel(series("Throughput of every pair", "bps",
                            query(f"{THROUGHPUT}{sel}", "{{source}} → {{destination}} {{protocol}} ×{{streams}}")))
         .with_panel(series("RTT of every pair", "s", query(RTT, "{{source}} → {{destination}}"),
                            description="Median TCP-connect time between the agents.")))
    d = (d.with_row(dash.Row("Nodes and problems"))
         .with_panel(series("Loopback ceiling per node", "bps", query(LOOPBACK, "{{node}} {{protocol}}"),
                            description="A node's rate to itself: the host's ceiling without the network."))
         .with_panel(listing("Open problems", query(f"{PROBLEMS} > 0", instant=True, as_table=True), "short",
                             "problems", "By benchmark, kind and severity; see the benchmark's problems page.",
                             width=12, height=8)))
    return d


def pair() -> dash.Dashboard:
    fwd = '{source="$source", destination="$destination", protocol=~"$protocol"}'
    rev = '{source="$destination", destination="$source", protocol=~"$protocol"}'
    d = (board("tpcmesh-pair", "tpcmesh / Pair",
               "One pair of nodes, both directions: throughput per protocol and streams, RTT, and how close the "
               "pair comes to the source's loopback ceiling.")
         .with_variable(variable("source", "Source", THROUGHPUT, "source"))
         .with_variable(variable("destination", "Destination", f'{THROUGHPUT}{{source="$source"}}', "destination"))
         .with_variable(variable("protocol", "Protocol",
                                 f'{THROUGHPUT}{{source="$source", destination="$destination"}}', "protocol",
                                 everything=True)))
    share = (f"{THROUGHPUT}{fwd} / on (source, protocol) group_left "
             f'label_replace({LOOPBACK}, "source", "$1", "node", "(.*)")')
    return (d.with_panel(series("Throughput $source → $destination", "bps",
                                query(f"{THROUGHPUT}{fwd}", "{{protocol}} ×{{streams}}")))
            .with_panel(series("Throughput $destination → $source", "bps",
                               query(f"{THROUGHPUT}{rev}", "{{protocol}} ×{{streams}}")))
            .with_panel(series("RTT", "s",
                               query(f'{RTT}{{source="$source", destination="$destination"}}',
                                     "$source → $destination"),
                               query(f'{RTT}{{source="$destination", destination="$source"}}', "$destination → $source",
                                     "B"),
                               description="Median TCP-connect time, each direction."))
            .with_panel(series("Share of the source's loopback ceiling", "percentunit",
                               query(share, "{{protocol}} ×{{streams}}"),
                               description="Throughput over the source's own rate to itself with the same "
                                           "protocol: near 1, the host, not the network, is the limit."))
            .with_panel(big("Loopback ceilings", "bps",
                            query(f'{LOOPBACK}{{node=~"$source|$destination"}}', "{{node}} {{protocol}}",
                                  instant=True), width=12))
            .with_panel(big("Latest throughput $source → $destination", "bps",
                            query(f"{THROUGHPUT}{fwd}", "{{protocol}} ×{{streams}}", instant=True), width=12)))


def runs() -> dash.Dashboard:
    d = board("tpcmesh-runs", "tpcmesh / Runs and delivery",
              "TransferRuns and their tests as the operator finished them, and the measurements' way to the "
              "dashboard: waiting, refused, ingested.")
    duration = "tpcmesh_operator_run_duration_seconds"
    d = (d.with_panel(big("Runs finished", "short",
                          query("sum by (outcome) (increase(tpcmesh_operator_runs_total[$__range]))", "{{outcome}}",
                                instant=True), width=8, description="In the time range shown, by outcome."))
         .with_panel(big("Run duration", "s",
                         query(f"histogram_quantile(0.5, sum by (le) (increase({duration}_bucket[$__range])))",
                               "median", instant=True),
                         query(f"histogram_quantile(0.95, sum by (le) (increase({duration}_bucket[$__range])))",
                               "p95", "B", instant=True),
                         width=8, description="Wall time of the runs finished in the time range shown."))
         .with_panel(big("Measurements waiting for the dashboard", "short",
                         query("sum(tpcmesh_operator_undelivered_measurements)", instant=True), width=8)))
    d = (d.with_row(dash.Row("Runs"))
         .with_panel(series("Tests of the latest run", "short", query("tpcmesh_operator_pairs", "{{status}}")))
         .with_panel(series("Tests finished", "short",
                            query("sum by (protocol, status) "
                                  "(increase(tpcmesh_operator_tests_total[$__rate_interval]))",
                                  "{{protocol}} {{status}}"))))
    d = (d.with_row(dash.Row("Delivery"))
         .with_panel(series("Measurements waiting for the dashboard", "short",
                            query("tpcmesh_operator_undelivered_measurements", "undelivered"),
                            description="Kept in the runs' status until the dashboard acknowledges them."))
         .with_panel(series("Measurements the dashboard refused", "short",
                            query("sum by (protocol) "
                                  "(increase(tpcmesh_operator_rejected_measurements_total[$__rate_interval]))",
                                  "{{protocol}}"),
                            description="Set aside in the run's status.rejected and logged in full by the operator."))
         .with_panel(series("Ingested by the dashboard", "short",
                            query("sum by (result) (increase(tpcmesh_dashboard_ingested_measurements_total"
                                  "[$__rate_interval]))", "{{result}}")))
         .with_panel(series("Ingest requests refused", "short",
                            query("sum by (reason) (increase(tpcmesh_dashboard_ingest_rejected_total"
                                  "[$__rate_interval]))", "{{reason}}")))
         .with_panel(series("Open problems", "short",
                            query(f'sum by (kind, severity) ({PROBLEMS}{{acknowledged="false"}})',
                                  "{{kind}} {{severity}}"),
                            description="Unacknowledged; the chart's TpcmeshProblem* alerts fire on these.",
                            width=24)))
    return d


def components() -> dash.Dashboard:
    op, ag, db = 'job=~"$operator_job"', 'job=~"$agent_job", instance=~"$instance"', 'job=~"$dashboard_job"'
    d = (board("tpcmesh-components", "tpcmesh / Operator, agents and dashboard",
               "The health of tpcmesh's own parts: scrapes, processes, the agents' protocol servers and tests, "
               "the dashboard's requests.")
         .with_variable(variable("operator_job", "Operator job", "tpcmesh_operator_undelivered_measurements", "job"))
         .with_variable(variable("agent_job", "Agent job", "tpcmesh_agent_active_transfers", "job"))
         .with_variable(variable("instance", "Agent", 'tpcmesh_agent_active_transfers{job=~"$agent_job"}', "instance",
                                 everything=True))
         .with_variable(variable("dashboard_job", "Dashboard job", "tpcmesh_dashboard_http_requests_total", "job")))
    d = (d.with_row(dash.Row("Operator"))
         .with_panel(big("Operator up", "short", query(f"up{{{op}}}", "{{instance}}", instant=True), width=4))
         .with_panel(series("Operator memory", "bytes", query(f"process_resident_memory_bytes{{{op}}}", "{{instance}}"),
                            width=7))
         .with_panel(series("Operator CPU", "short",
                            query(f"rate(process_cpu_seconds_total{{{op}}}[$__rate_interval])", "{{instance}}"),
                            description="Cores in use.", width=7))
         .with_panel(series("Operator open files", "short", query(f"process_open_fds{{{op}}}", "{{instance}}"),
                            width=6)))
    d = (d.with_row(dash.Row("Agents"))
         .with_panel(series("Agents up", "short", query(f"up{{{ag}}}", "{{instance}}"),
                            description="1 while Prometheus scrapes the agent's /metrics."))
         .with_panel(series("Protocol servers up", "short",
                            query(f"tpcmesh_agent_server_up{{{ag}}}", "{{instance}} {{server}}"),
                            description="The servers each agent supervises (XRootD, GridFTP, iperf3): 1 running."))
         .with_panel(series("Tests running", "short", query(f"tpcmesh_agent_active_transfers{{{ag}}}",
                                                            "{{instance}}")))
         .with_panel(series("Received", "bps",
                            query(f"sum by (instance, protocol) (rate(tpcmesh_agent_bytes_total{{{ag}}}"
                                  "[$__rate_interval])) * 8", "{{instance}} {{protocol}}"),
                            description="Bits per second the agents' movers received, as destinations."))
         .with_panel(series("Tests finished on the agents", "short",
                            query(f"sum by (protocol, status) (increase(tpcmesh_agent_transfers_total{{{ag}}}"
                                  "[$__rate_interval]))", "{{protocol}} {{status}}"), width=24))
         .with_panel(series("Loss probes: packets the reflector dropped", "short",
                            query(f"sum by (instance, reason) (increase(tpcmesh_agent_loss_reflector_dropped_total"
                                  f"{{{ag}}}[$__rate_interval]))", "{{instance}} {{reason}}"),
                            description="TWAMP-light packets each agent's reflector did not answer: from outside "
                                        "the mesh (not_allowed), malformed, too short."))
         .with_panel(series("Loss probes: summaries waiting", "short",
                            query(f"tpcmesh_agent_loss_summaries_pending{{{ag}}}", "{{instance}}"),
                            description="Per-peer loss summaries each agent keeps until a collector takes them "
                                        "(bounded; the oldest go first when full).")))
    d = (d.with_row(dash.Row("Dashboard"))
         .with_panel(big("Dashboard up", "short", query(f"up{{{db}}}", "{{instance}}", instant=True), width=4))
         .with_panel(series("Requests", "reqps",
                            query(f"sum by (code) (rate(tpcmesh_dashboard_http_requests_total{{{db}}}"
                                  "[$__rate_interval]))", "{{code}}"), width=10))
         .with_panel(series("Request time, p95", "s",
                            query("histogram_quantile(0.95, sum by (route, le) "
                                  f"(rate(tpcmesh_dashboard_http_request_duration_seconds_bucket{{{db}}}"
                                  "[$__rate_interval])))", "{{route}}"), width=10))
         .with_panel(series("Dashboard memory", "bytes",
                            query(f"process_resident_memory_bytes{{{db}}}", "{{instance}}"), width=24)))
    return d


DASHBOARDS = {"tpcmesh-overview": overview, "tpcmesh-pair": pair, "tpcmesh-runs": runs,
              "tpcmesh-components": components}


def text(builder: Builder) -> str:
    built = builder.build()
    # ids in layout order (the SDK leaves them out): links to a panel (viewPanel=<id>) stay put while it does
    panels = [q for p in built.panels or [] for q in [p, *(getattr(p, "panels", None) or [])]]
    for number, panel in enumerate(panels, start=1):
        panel.id_val = number
    return json.dumps(built, cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render() -> dict[Path, str]:
    return {OUT / f"{name}.json": text(make()) for name, make in DASHBOARDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file drifted")
    ap.add_argument("--root", type=Path, default=REPO, help="the repository to work on (default: this one)")
    args = ap.parse_args(argv)
    wanted = render()
    found = [p.relative_to(args.root) for p in (args.root / OUT).glob("*.json")]
    stale = [p for p in found if p not in wanted]
    return sync(args.root, wanted, check=args.check, made_by="hack/grafana.py", remake="make grafana", stale=stale,
                stale_is="no dashboard")

if __name__ == "__main__":
    sys.exit(main())
