"""manifests/protocols.yaml is the one definition of the protocols: the CRD's, the measurement schema's and the chart's
enums, the chart's default list, and the agent's, operator's and dashboard's constants are made from it
(hack/protocols.py, run by `make manifests`), and a registry entry alone is enough for all of them to agree."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))  # as when run: its sibling hack/generated.py is importable
_spec = importlib.util.spec_from_file_location("hack_protocols", REPO / "hack" / "protocols.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen  # dataclasses look their module up there
_spec.loader.exec_module(gen)

MADE_UP = {"name": "made-up", "kind": "tpc", "description": "a protocol nobody runs", "schemes": ["madeup"],
           "streams": True, "tokens": True, "program": "made-upd", "port": 4242}


def _copy(tmp_path: Path) -> Path:
    for rel in [str(gen.REGISTRY), *gen.GENERATED, *gen.EDITED]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


def _module(text: str) -> dict:
    scope: dict = {}
    exec(compile(text, "generated", "exec"), scope)
    return scope


def test_every_generated_file_is_what_the_registry_makes():
    assert gen.main(["--check"]) == 0, "run `make manifests`"


def test_a_protocol_added_to_the_registry_alone_reaches_every_list(tmp_path):
    root = _copy(tmp_path)
    registry = yaml.safe_load((root / gen.REGISTRY).read_text())
    registry["protocols"].insert(-1, MADE_UP)  # before rtt, the probe
    (root / gen.REGISTRY).write_text(yaml.safe_dump(registry, sort_keys=False))
    assert gen.main(["--check", "--root", str(root)]) == 1
    assert gen.main(["--root", str(root)]) == 0
    assert gen.main(["--check", "--root", str(root)]) == 0

    crd = yaml.safe_load((root / "manifests/crds/transferbenchmarks.yaml").read_text())
    field = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["protocols"]
    assert "made-up" in field["items"]["enum"] and field["maxItems"] == len(field["items"]["enum"]) == 6
    assert (root / "charts/tpcmesh/crds/transferbenchmarks.yaml").read_text() == \
        (root / "manifests/crds/transferbenchmarks.yaml").read_text()
    schema = json.loads((root / "manifests/schemas/measurement.v1.schema.json").read_text())["$defs"]["protocol"]
    assert schema["enum"][-2:] == ["made-up", "rtt"]
    assert "TPC movers: builtin, xrootd-https, xrootd-root, gridftp, made-up." in schema["description"]
    values_schema = json.loads((root / "charts/tpcmesh/values.schema.json").read_text())
    assert "made-up" in values_schema["properties"]["agent"]["properties"]["protocols"]["items"]["enum"]
    values = (root / "charts/tpcmesh/values.yaml").read_text()
    assert "made-up" in yaml.safe_load(values)["agent"]["protocols"]
    assert "# -- Enabled protocols: builtin, xrootd-https, xrootd-root, gridftp, iperf3, made-up." in values

    agent = _module((root / "agent/tpcmesh_agent/protocols.py").read_text())
    operator = _module((root / "operator/tpcmesh_operator/protocols.py").read_text())
    dashboard = _module((root / "dashboard/results/protocols.py").read_text())
    assert agent["DEFAULT_PORTS"]["made-up"] == 4242 and "made-up" in agent["PROTOCOLS"]
    assert operator["SCHEME_PROTOCOLS"]["madeup"] == "made-up" and "made-up" in operator["TOKEN_PROTOCOLS"]
    assert "made-up" in dashboard["TPC_PROTOCOLS"] and dashboard["PROTOCOLS"][-1] == "rtt"


def test_a_hand_edited_list_is_found(tmp_path, capsys):
    root = _copy(tmp_path)
    crd = root / "manifests/crds/transferbenchmarks.yaml"
    crd.write_text(crd.read_text().replace("enum: [builtin, xrootd-https, xrootd-root, gridftp, iperf3]",
                                           "enum: [builtin, xrootd-https, gridftp, iperf3]"))
    assert gen.main(["--check", "--root", str(root)]) == 1
    said = capsys.readouterr().err
    assert "manifests/crds/transferbenchmarks.yaml is not what manifests/protocols.yaml makes" in said


@pytest.mark.parametrize("change, message", [
    ({"kind": "disk"}, "protocols[0].kind: 'disk' is not one of tpc, capacity, latency"),
    ({"name": "Builtin"}, "protocols[0].name: 'Builtin' is not a new lower-case name"),
    ({"port": "9080"}, "protocols[0].port: '9080' is not of the right type"),
])
def test_a_malformed_entry_is_named(tmp_path, change, message):
    registry = yaml.safe_load((REPO / gen.REGISTRY).read_text())
    registry["protocols"][0].update(change)
    path = tmp_path / "protocols.yaml"
    path.write_text(yaml.safe_dump(registry))
    with pytest.raises(gen.RegistryError, match=re.escape(message)):
        gen.load(path)


def test_the_products_read_the_registry():
    from results.models import Measurement
    from tpcmesh_agent.config import ALL_PROTOCOLS
    from tpcmesh_operator.external import endpoints as externals
    from tpcmesh_operator.plan import spec
    from tpcmesh_operator.run import agents

    names = [p.name for p in gen.load(REPO / gen.REGISTRY)]
    assert [c for c, _ in Measurement._meta.get_field("protocol").choices] == names
    assert list(ALL_PROTOCOLS) == list(spec.PROTOCOLS) == [n for n in names if n != "rtt"]
    assert externals.SCHEME_PROTOCOLS["davs"] == "xrootd-https" and agents.DEFAULT_PORTS["gridftp"] == 2811
