"""The operator's rooms keep their rules (operator/README.md, "Rooms"), read from the source with `ast`:
- kopf handlers are registered in main.py and nowhere else;
- planning (plan/) is pure: it imports no kopf, no Kubernetes client, no HTTP client, and nothing of the rooms that
  do I/O (run/, external/ but its parsing, credentials/, kube.py);
- the product never imports the lab (tpcmesh_lab), which is not in the operator image.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "operator" / "tpcmesh_operator"
IO_LIBRARIES = {"kopf", "kubernetes", "httpx", "aiohttp", "requests", "urllib3", "socket", "subprocess"}
# plan/spec.py parses spec.externalEndpoints with external/endpoints.py (pure); that is the one way out of plan/
PURE_IMPORTS_OUTSIDE_PLAN = {"tpcmesh_operator.external.endpoints", "tpcmesh_operator.protocols"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path) -> set[str]:
    """Every module `module` imports, absolute (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}  # `from . import x` may name a module
    return found


def _handler_registrations(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                call = deco.func if isinstance(deco, ast.Call) else deco
                if ast.unparse(call).startswith("kopf."):
                    lines.append(deco.lineno)
    return lines


def test_the_rooms_exist_with_their_interfaces():
    for room in ("plan", "run", "external", "credentials"):
        init = PACKAGE / room / "__init__.py"
        assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), f"{init} must say what its room holds"


def test_kopf_handlers_are_registered_in_main_only():
    elsewhere = {str(path.relative_to(REPO)): lines for module, path in _modules().items()
                 if not module.endswith(".main") and (lines := _handler_registrations(path))}
    assert not elsewhere, f"kopf handlers registered outside main.py (move them there): {elsewhere}"
    assert _handler_registrations(PACKAGE / "main.py"), "main.py registers no handler: the check reads nothing"


def test_planning_is_pure():
    modules = _modules()
    impure = {}
    for module, path in modules.items():
        if not module.startswith("tpcmesh_operator.plan"):
            continue
        bad = set()
        for name in _imports(module, path):
            top = name.split(".")[0]
            if top in IO_LIBRARIES:
                bad.add(name)
            elif top == "tpcmesh_operator" and not name.startswith("tpcmesh_operator.plan") and name in modules:
                if name not in PURE_IMPORTS_OUTSIDE_PLAN and name != "tpcmesh_operator":
                    bad.add(name)
        if bad:
            impure[str(path.relative_to(REPO))] = sorted(bad)
    assert not impure, f"planning (plan/) must not do I/O or import the rooms that do: {impure}"


def test_the_product_never_imports_the_lab():
    offenders = {}
    for package in ("operator/tpcmesh_operator", "agent/tpcmesh_agent", "dashboard/results", "dashboard/config"):
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            names = _imports(".".join(parts), path)
            if any(n.split(".")[0] == "tpcmesh_lab" for n in names):
                offenders[str(path.relative_to(REPO))] = sorted(n for n in names if n.startswith("tpcmesh_lab"))
    assert not offenders, f"the lab (tpcmesh_lab) is a developer tool, not in any image; product code imports it: " \
        f"{offenders}"


def test_the_entry_point_registers_the_handlers():
    """`tpcmesh-operator` (__main__.py) imports main.py, which registers every handler: without it the operator
    logs in with kopf's defaults and handles nothing (a refactor once dropped the import as unused)."""
    names = _imports("tpcmesh_operator.__main__", PACKAGE / "__main__.py")
    assert "tpcmesh_operator.main" in names, "__main__.py must import .main (the handlers' registration)"
