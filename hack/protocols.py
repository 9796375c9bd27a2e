#!/usr/bin/env python3
"""Write everything that lists the protocols from their one definition, manifests/protocols.yaml.

    hack/protocols.py            write what drifted (run by `make manifests`)
    hack/protocols.py --check    exit 1 naming each file that is not what the registry makes
    hack/protocols.py --root DIR the same on another copy of the repository (the drift test's)

Generated: each package's protocols.py (the agent's, the operator's, the dashboard's; three packages that share no
code, so each gets the constants it reads), and in place, leaving every other byte as it is, the enums of the
TransferBenchmark CRD, the measurement schema and the chart's values schema, and the chart's default list of an
agent's protocols.
"""

from __future__ import annotations

import argparse
import json
import pprint
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from generated import sync

REPO = Path(__file__).resolve().parent.parent
REGISTRY = Path("manifests/protocols.yaml")
KINDS = ("tpc", "capacity", "latency")
NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")  # the dashboard stores it in 20 characters
FIELDS = {"name": str, "kind": str, "description": str, "schemes": list, "streams": bool, "tokens": bool,
          "program": (str, type(None)), "port": (int, type(None))}


class RegistryError(ValueError):
    """The registry is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Protocol:
    """One entry of the registry, as load() checked it (the YAML's fields and their types: FIELDS)."""

    name: str
    kind: str  # one of KINDS
    description: str
    schemes: tuple[str, ...]
    streams: bool
    tokens: bool
    program: str | None
    port: int | None


def load(path: Path) -> list[Protocol]:
    doc = yaml.safe_load(path.read_text())
    entries = doc.get("protocols") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise RegistryError(f"{path}: wants a non-empty list `protocols`")
    out: list[Protocol] = []
    for i, entry in enumerate(entries):
        where = f"{path}: protocols[{i}]"
        if not isinstance(entry, dict) or set(entry) != set(FIELDS):
            raise RegistryError(f"{where}: wants exactly the fields {', '.join(FIELDS)}")
        for field, kind in FIELDS.items():
            if not isinstance(entry[field], kind) or (kind is not bool and isinstance(entry[field], bool)):
                raise RegistryError(f"{where}.{field}: {entry[field]!r} is not of the right type")
        if not NAME.match(entry["name"]) or entry["name"] in {p.name for p in out}:
            raise RegistryError(f"{where}.name: {entry['name']!r} is not a new lower-case name of up to 20 characters")
        if entry["kind"] not in KINDS:
            raise RegistryError(f"{where}.kind: {entry['kind']!r} is not one of {', '.join(KINDS)}")
        out.append(Protocol(**{**entry, "schemes": tuple(entry["schemes"])}))
    return out


# ---- what each consumer reads -------------------------------------------------------------------------------------
def movers(reg: Sequence[Protocol]) -> list[str]:
    """What an agent runs and a benchmark asks for (spec.protocols): every protocol but the probes."""
    return [p.name for p in reg if p.kind != "latency"]


def _names(reg: Sequence[Protocol], keep: Callable[[Protocol], bool]) -> list[str]:
    return [p.name for p in reg if keep(p)]


def _module(doc: str, constants: dict[str, object]) -> str:
    lines = [f'"""{doc}', "", "Generated from manifests/protocols.yaml by `make manifests` (hack/protocols.py): do "
             'not edit.', '"""', ""]
    for name, value in constants.items():
        lines.append(f"{name} = {pprint.pformat(value, width=110 - len(name), sort_dicts=False)}"
                     .replace("\n", "\n" + " " * (len(name) + 3)))
    return "\n".join(lines) + "\n"


def agent_module(reg: Sequence[Protocol]) -> str:
    return _module("The protocols an agent can run, and their default ports.", {
        "PROTOCOLS": tuple(movers(reg)),
        "DEFAULT_PORTS": {p.name: p.port for p in reg if p.kind != "latency"},
    })


def operator_module(reg: Sequence[Protocol]) -> str:
    return _module("The protocols a TransferBenchmark may ask for, and what the operator needs to know of them.", {
        "PROTOCOLS": tuple(movers(reg)),
        "TPC_PROTOCOLS": tuple(_names(reg, lambda p: p.kind == "tpc")),
        "TOKEN_PROTOCOLS": tuple(_names(reg, lambda p: p.tokens)),
        "SCHEME_PROTOCOLS": {s: p.name for p in reg for s in p.schemes},
        "DEFAULT_PORTS": {p.name: p.port for p in reg if p.kind != "latency"},
    })


def dashboard_module(reg: Sequence[Protocol]) -> str:
    return _module("The protocols a measurement may name (the probes too).", {
        "PROTOCOLS": [p.name for p in reg],
        "TPC_PROTOCOLS": _names(reg, lambda p: p.kind == "tpc"),
        "TOKEN_PROTOCOLS": _names(reg, lambda p: p.tokens),
    })


# ---- rewriting a list in place ------------------------------------------------------------------------------------
def _json_list(text: str, key: str, old: Sequence[str], new: Sequence[str], where: str) -> str:
    """Replace the one `"key": [old...]` array of a JSON text with `new`, in the layout it had (one line, or one
    item per line at the same indent)."""
    items = r"\s*,\s*".join(re.escape(json.dumps(v)) for v in old)
    pattern = re.compile(rf'("{re.escape(key)}":\s*\[)(\s*){items}(\s*)\]')
    found = list(pattern.finditer(text))
    if len(found) != 1:
        raise RegistryError(f"{where}: found {len(found)} {key} lists {list(old)} (want exactly one)")
    m = found[0]
    if "\n" in m.group(2):
        body = m.group(2) + ("," + m.group(2)).join(json.dumps(v) for v in new) + m.group(3)
    else:
        body = m.group(2) + ", ".join(json.dumps(v) for v in new) + m.group(3)
    return text[:m.start()] + m.group(1) + body + "]" + text[m.end():]


def _yaml_flow_list(text: str, key: str, old: Sequence[str], new: Sequence[str], where: str) -> str:
    """Replace the one `key: [old, ...]` flow list of a YAML text with `new`."""
    items = r",\s*".join(re.escape(v) for v in old)
    pattern = re.compile(rf"(\b{re.escape(key)}: )\[{items}\]")
    found = list(pattern.finditer(text))
    if len(found) != 1:
        raise RegistryError(f"{where}: found {len(found)} `{key}: {list(old)}` lists (want exactly one)")
    m = found[0]
    return text[:m.start()] + m.group(1) + "[" + ", ".join(new) + "]" + text[m.end():]


def _crd(text: str, reg: Sequence[Protocol], where: str) -> str:
    """spec.protocols' enum and maxItems in the TransferBenchmark CRD."""
    doc = yaml.safe_load(text)
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    field = spec["protocols"]
    text = _yaml_flow_list(text, "enum", field["items"]["enum"], movers(reg), where)
    # maxItems sits in the same property, just above its items: the first one after the property's own key
    key = re.search(r"\n(\s+)protocols:\n", text)
    if key is None:
        raise RegistryError(f"{where}: no `protocols:` property")
    at = text.index(f"maxItems: {field['maxItems']}", key.end())
    return text[:at] + f"maxItems: {len(movers(reg))}" + text[at + len(f"maxItems: {field['maxItems']}"):]


KIND_WORDS = {"tpc": "TPC movers", "capacity": "Raw TCP capacity", "latency": "Latency"}


def _measurement_schema(text: str, reg: Sequence[Protocol], where: str) -> str:
    """$defs.protocol: its enum, and its description naming each kind's protocols."""
    old = json.loads(text)["$defs"]["protocol"]
    text = _json_list(text, "enum", old["enum"], [p.name for p in reg], where)
    kinds = [f"{KIND_WORDS[k]}: {', '.join(_names(reg, lambda p, k=k: p.kind == k))}." for k in KINDS
             if any(p.kind == k for p in reg)]
    described = json.dumps("What was measured. " + " ".join(kinds))
    if text.count(json.dumps(old["description"])) != 1:
        raise RegistryError(f"{where}: want $defs.protocol's description once")
    return text.replace(json.dumps(old["description"]), described)


def _values_schema(text: str, reg: Sequence[Protocol], where: str) -> str:
    old = json.loads(text)["properties"]["agent"]["properties"]["protocols"]["items"]["enum"]
    return _json_list(text, "enum", old, movers(reg), where)


def _values(text: str, reg: Sequence[Protocol], where: str) -> str:
    """The chart's default: an agent runs every protocol; its comment lists them."""
    old = yaml.safe_load(text)["agent"]["protocols"]
    text = _yaml_flow_list(text, "protocols", old, movers(reg), where)
    comment = re.compile(r"(# -- Enabled protocols: )[a-z0-9, -]+\.")
    if len(comment.findall(text)) != 1:
        raise RegistryError(f"{where}: want one `# -- Enabled protocols: ...` comment")
    return comment.sub(lambda m: m.group(1) + ", ".join(movers(reg)) + ".", text)


GENERATED: dict[str, Callable[[Sequence[Protocol]], str]] = {
    "agent/tpcmesh_agent/protocols.py": agent_module,
    "operator/tpcmesh_operator/protocols.py": operator_module,
    "dashboard/results/protocols.py": dashboard_module,
}
EDITED: dict[str, Callable[[str, Sequence[Protocol], str], str]] = {
    "manifests/crds/transferbenchmarks.yaml": _crd,
    "charts/tpcmesh/crds/transferbenchmarks.yaml": _crd,
    "manifests/schemas/measurement.v1.schema.json": _measurement_schema,
    "charts/tpcmesh/values.schema.json": _values_schema,
    "charts/tpcmesh/values.yaml": _values,
}


def render(root: Path) -> dict[str, str]:
    """Every file the registry under `root` makes: relative path -> text."""
    reg = load(root / REGISTRY)
    out = {path: make(reg) for path, make in GENERATED.items()}
    for path, edit in EDITED.items():
        out[path] = edit((root / path).read_text(), reg, path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file drifted")
    ap.add_argument("--root", type=Path, default=REPO, help="the repository to work on (default: this one)")
    args = ap.parse_args(argv)
    try:
        wanted = render(args.root)
    except (RegistryError, OSError, KeyError, yaml.YAMLError, json.JSONDecodeError) as e:
        print(f"hack/protocols.py: {e}", file=sys.stderr)
        return 2
    return sync(args.root, wanted, check=args.check, made_by=str(REGISTRY), remake="make manifests")

if __name__ == "__main__":
    sys.exit(main())
