"""The chart's alert rules (its PrometheusRules), rendered by helm, pass `promtool check rules` and the cases of
tests/promtool/tpcmesh-alerts.test.yaml (`promtool test rules`, Debian's prometheus package); every rule has a case
that fires, and breaking a rule fails its case."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.controlplane import K8S_VERSION, binary
from tests.support.paths import REPO

CHART = REPO / "charts" / "tpcmesh"
CASES = REPO / "tests" / "promtool" / "tpcmesh-alerts.test.yaml"
RULE_TEMPLATES = ["templates/operator-prometheusrule.yaml", "templates/dashboard-prometheusrule.yaml",
                  "templates/agent-prometheusrule.yaml"]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing: install Debian's prometheus package (hack/setup.sh does, as root)")
    return found


def rendered_groups(*values: str) -> list[dict]:
    """The rule groups of every PrometheusRule the chart renders with its alerts on (and ``values``: --set a=b)."""
    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built; run `make control-plane`")
    args = [str(helm), "template", "t", str(CHART), "--kube-version", K8S_VERSION.lstrip("v"),
            "--set", "metrics.prometheusRule.enabled=true"]
    for v in values:
        args += ["--set", v]
    for t in RULE_TEMPLATES:
        args += ["-s", t]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert [d["kind"] for d in docs] == ["PrometheusRule"] * len(RULE_TEMPLATES)
    return [g for d in docs for g in d["spec"]["groups"]]


def alert_names(groups: list[dict]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def run_cases(groups: list[dict], directory: Path) -> subprocess.CompletedProcess:
    """promtool test rules on the cases, with ``groups`` as their rules.yaml."""
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(CASES, directory / CASES.name)
    return subprocess.run([promtool(), "test", "rules", CASES.name], cwd=directory, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def groups() -> list[dict]:
    return rendered_groups()


def test_the_rendered_rules_are_valid(groups, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    out = subprocess.run([promtool(), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_names(groups))} rules found" in out.stdout


def test_the_cases_pass(groups, tmp_path):
    out = run_cases(groups, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_rule_has_a_case_that_fires(groups):
    cases = yaml.safe_load(CASES.read_text())["tests"]
    firing = {t["alertname"] for c in cases for t in c.get("alert_rule_test", []) if t.get("exp_alerts")}
    names = alert_names(groups)
    assert len(names) == 16 and len(set(names)) == len(names), names
    assert set(names) == firing, f"no case fires these rules: {sorted(set(names) - firing)}; " \
                                 f"cases of no rule: {sorted(firing - set(names))}"


@pytest.mark.parametrize("alert", ["TpcmeshPairBelowCritical", "TpcmeshRunFailed", "TpcmeshResultsUndelivered",
                                   "TpcmeshProblemNode", "TpcmeshProblemSitePair", "TpcmeshProblemOneDirection",
                                   "TpcmeshProblemSilent", "TpcmeshProblemTuning", "TpcmeshProblemStorage",
                                   "TpcmeshPairLoss", "TpcmeshLossProbeDown", "TpcmeshLossSummariesPiling",
                                   "TpcmeshProblemLoss",
                                   "TpcmeshProblemLossOnset", "TpcmeshProblemLossNode", "TpcmeshProblemLossSite"])
def test_a_broken_rule_fails_its_case(groups, tmp_path, alert):
    broken = [{**g, "rules": [{**r, "expr": f"({r['expr']}) and on () vector(0) > 0"} if r.get("alert") == alert
                              else r for r in g["rules"]]} for g in groups]
    assert broken != groups
    out = run_cases(broken, tmp_path)
    assert out.returncode != 0 and f"alertname: {alert}," in out.stdout + out.stderr, out.stdout + out.stderr


def test_the_threshold_comes_from_the_values(tmp_path):
    """criticalBitsPerSecond below the case's 500 Mbit/s pair: its case no longer fires."""
    out = run_cases(rendered_groups("metrics.prometheusRule.criticalBitsPerSecond=100000000"), tmp_path)
    assert out.returncode != 0 and "alertname: TpcmeshPairBelowCritical," in out.stdout + out.stderr, out.stdout


def test_the_loss_bound_comes_from_the_values(tmp_path):
    """lossRatio above the case's 0.17 % pair (1: --set takes integers only): its case no longer fires."""
    out = run_cases(rendered_groups("metrics.prometheusRule.lossRatio=1"), tmp_path)
    assert out.returncode != 0 and "alertname: TpcmeshPairLoss," in out.stdout + out.stderr, out.stdout
