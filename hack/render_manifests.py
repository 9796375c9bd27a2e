"""Render manifests/install.yaml and manifests/rbac/*.yaml from charts/tpcmesh (`make manifests`).

Usage: python hack/render_manifests.py <helm> [<output-dir>]   (output-dir defaults to manifests/)
The test tests/cluster/test_manifests.py renders into a temporary directory and compares.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "tpcmesh"
NAMESPACE = RELEASE = "tpcmesh"
KUBE_VERSION = "1.34.4"

HEADER = f"""\
# tpcmesh plain-YAML install, rendered from charts/tpcmesh by `make manifests` (do not edit by hand).
# Release "{RELEASE}" in namespace "{NAMESPACE}", chart defaults plus hack/install-values.yaml.
# Before applying, create the Secrets the chart would generate:
#   kubectl create namespace {NAMESPACE}
#   kubectl -n {NAMESPACE} create secret generic tpcmesh-agent-token --from-literal=token="$(openssl rand -hex 24)"
#   kubectl -n {NAMESPACE} create secret generic tpcmesh-results-token --from-literal=token="$(openssl rand -hex 20)"
#   kubectl -n {NAMESPACE} create secret generic tpcmesh-dashboard-secret-key \\
#     --from-literal=secret-key="$(openssl rand -hex 32)"
#   kubectl -n {NAMESPACE} create secret generic tpcmesh-postgresql --from-literal=password="$(openssl rand -hex 16)"
#   kubectl apply --server-side -f crds/      # the CRDs first: install.yaml also holds a KopfPeering object
#   kubectl wait --for condition=established crd/kopfpeerings.kopf.dev crd/transferbenchmarks.tpcmesh.io \
#     crd/transferruns.tpcmesh.io
#   kubectl apply --server-side -f install.yaml
# Then label the data-transfer nodes: kubectl label node <node> tpcmesh.io/fast-network=true
"""


def render(helm: str) -> list[dict]:
    out = subprocess.run([helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds",
                          "--skip-tests", "--kube-version", KUBE_VERSION, "-f",
                          str(REPO / "hack" / "install-values.yaml")],
                         capture_output=True, text=True, check=True)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    for d in docs:
        labels = d.get("metadata", {}).get("labels") or {}
        labels.pop("helm.sh/chart", None)
        if "app.kubernetes.io/managed-by" in labels:
            labels["app.kubernetes.io/managed-by"] = "kubectl"
        tmpl = (d.get("spec") or {}).get("template", {}).get("metadata", {}).get("labels")
        if tmpl:
            tmpl.pop("helm.sh/chart", None)
            if "app.kubernetes.io/managed-by" in tmpl:
                tmpl["app.kubernetes.io/managed-by"] = "kubectl"
    return docs


def dump(docs: list[dict], header: str) -> str:
    return header + "".join("---\n" + yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


def write_all(helm: str, out_dir: Path) -> list[Path]:
    docs = render(helm)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
        "app.kubernetes.io/part-of": "tpcmesh"}}}
    written = [out_dir / "install.yaml"]
    (out_dir / "rbac").mkdir(parents=True, exist_ok=True)
    written[0].write_text(dump([ns, *docs], HEADER))
    rbac_kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    for component in ("operator", "agent"):
        part = [d for d in docs if d["kind"] in rbac_kinds
                and d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
        path = out_dir / "rbac" / f"{component}.yaml"
        path.write_text(dump(part, f"# tpcmesh {component}: ServiceAccount and least-privilege RBAC for release "
                                   f"\"{RELEASE}\" in namespace \"{NAMESPACE}\".\n# Rendered from charts/tpcmesh "
                                   "by `make manifests` (do not edit by hand).\n"))
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in write_all(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "manifests"):
        print(p.relative_to(REPO) if p.is_relative_to(REPO) else p)
