"""The grid's default thresholds are one set of numbers: the CRD's defaults, the operator's and the dashboard's."""

from __future__ import annotations

import yaml
from results import thresholds
from tpcmesh_operator.plan.spec import DEFAULT_EFFICIENCY, DEFAULT_THRESHOLDS

from tests.support.paths import REPO


def test_the_crd_the_operator_and_the_dashboard_agree_on_the_defaults():
    crd = yaml.safe_load((REPO / "manifests" / "crds" / "transferbenchmarks.yaml").read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    from_crd = {k: v["default"] for k, v in props["thresholds"]["properties"].items() if k != "efficiency"}
    from_dashboard = {key: thresholds.DEFAULTS[kind][level] for key, (kind, level) in thresholds.KEYS.items()}
    assert from_crd == dict(DEFAULT_THRESHOLDS) == from_dashboard
    # efficiency's defaults live in the CRD's CEL rule (an absent bound is its default there)
    rule = props["thresholds"]["properties"]["efficiency"]["x-kubernetes-validations"][0]["rule"]
    assert dict(DEFAULT_EFFICIENCY) == thresholds.EFFICIENCY_DEFAULTS
    for key, value in DEFAULT_EFFICIENCY.items():
        assert f"has(self.{key}) ? self.{key} : {value:g})" in rule, rule
