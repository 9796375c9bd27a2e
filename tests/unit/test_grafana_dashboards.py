"""The chart's Grafana dashboards are what hack/grafana.py makes with grafana-foundation-sdk (`make grafana`), and they
show every metric the agent, the operator and the dashboard export. That each query returns data is asked of a
real Prometheus in tests/integration/test_grafana.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase
from results import metrics as dashboard_metrics
from tpcmesh_agent.metrics import AgentMetrics
from tpcmesh_operator import metrics as operator_metrics

from tests.support.controlplane import K8S_VERSION, binary
from tests.support.grafana import DASHBOARDS, committed, generator, panels, targets, variables
from tests.support.paths import REPO

gen = generator()


def exported_metrics() -> set[str]:
    """The metric families the three programs define, read from their own registries and modules."""
    agent = {f.name for f in AgentMetrics(lambda: {}).registry.collect()}
    operator = {v._name for v in vars(operator_metrics).values() if isinstance(v, MetricWrapperBase)}
    dash = {v._name for v in vars(dashboard_metrics).values() if isinstance(v, MetricWrapperBase)}
    dash |= {f.name for f in dashboard_metrics.ProblemsCollector().describe()}
    return agent | operator | dash


def mentions(expr: str, family: str) -> bool:
    return re.search(rf"\b{family}(_total|_bucket|_sum|_count)?\b", expr) is not None


def test_the_committed_dashboards_are_what_the_generator_makes():
    assert gen.main(["--check"]) == 0, "run `make grafana`"


def test_the_check_finds_an_edited_a_missing_and_a_stray_file(tmp_path: Path):
    out = tmp_path / gen.OUT
    shutil.copytree(DASHBOARDS, out)
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0
    edited = out / "tpcmesh-pair.json"
    edited.write_text(edited.read_text().replace("tpcmesh / Pair", "tpcmesh / Pair by hand"))
    (out / "tpcmesh-runs.json").unlink()
    (out / "by-hand.json").write_text("{}\n")
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0
    assert not (out / "by-hand.json").exists()
    assert edited.read_text() == (DASHBOARDS / "tpcmesh-pair.json").read_text()


def test_the_four_dashboards_of_issue_29():
    boards = committed()
    assert set(boards) == {"tpcmesh-overview", "tpcmesh-pair", "tpcmesh-runs", "tpcmesh-components"}
    for uid, b in boards.items():
        assert (REPO / gen.OUT / f"{uid}.json").is_file()
        assert "tpcmesh" in b["tags"] and b["title"].startswith("tpcmesh / ")
        names = [v["name"] for v in variables(b)]
        assert names[0] == "datasource" and len(names) == len(set(names)), names


def test_panels_have_ids_and_do_not_overlap():
    for b in committed().values():
        every = [q for p in b["panels"] for q in [p, *p.get("panels", [])]]
        ids = [p.get("id") for p in every]
        assert all(ids) and len(set(ids)) == len(ids), (b["uid"], ids)
        cells: dict[tuple[int, int], str] = {}
        for p in every:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, (b["uid"], p["title"], g)
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, f"{b['uid']}: {p['title']} overlaps {cells[x, y]}"
                    cells[x, y] = p["title"]


def test_every_panel_queries_the_chosen_prometheus():
    for b in committed().values():
        for p in panels(b):
            assert p.get("targets"), f"{b['uid']} / {p['title']} has no query"
            for t in [p, *p["targets"]]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (b["uid"], p["title"])
        for v in variables(b)[1:]:
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (b["uid"], v["name"])
            assert re.fullmatch(r"label_values\(.+, \w+\)", v["query"]), v["query"]


def test_every_metric_the_product_exports_is_on_a_dashboard():
    exported = exported_metrics()
    assert len(exported) == 18, sorted(exported)  # a new metric: put it on a dashboard in hack/grafana.py
    exprs = [t.expr for b in committed().values() for t in targets(b)]
    missing = sorted(m for m in exported if not any(mentions(e, m) for e in exprs))
    assert not missing, f"metrics on no dashboard (hack/grafana.py): {missing}"


def configmaps(*values: str) -> list[dict]:
    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built; run `make control-plane`")
    args = [str(helm), "template", "tpc", str(REPO / "charts" / "tpcmesh"), "--namespace", "mesh",
            "--kube-version", K8S_VERSION.lstrip("v")]
    for v in values:
        args += ["--set", v]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout)
            if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-grafana-dashboards")]


def test_the_chart_ships_the_dashboards_for_grafanas_sidecar():
    [cm] = configmaps()
    assert cm["metadata"]["namespace"] == "mesh" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    [moved] = configmaps("metrics.grafanaDashboards.namespace=monitoring", "metrics.grafanaDashboards.label=dashboards",
                         "metrics.grafanaDashboards.labelValue=tpcmesh",
                         "metrics.grafanaDashboards.annotations.grafana_folder=tpcmesh")
    assert moved["metadata"]["namespace"] == "monitoring" and moved["metadata"]["labels"]["dashboards"] == "tpcmesh"
    assert "grafana_dashboard" not in moved["metadata"]["labels"]
    assert moved["metadata"]["annotations"] == {"grafana_folder": "tpcmesh"}
    assert configmaps("metrics.grafanaDashboards.enabled=false") == []
