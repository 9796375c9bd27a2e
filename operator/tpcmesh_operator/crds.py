"""`tpcmesh-apply-crds DIR`: server-side apply the CustomResourceDefinitions in DIR and wait until each is Established.

Helm installs the files of a chart's crds/ once and never upgrades them, so a new TransferBenchmark field would never
reach a cluster that upgrades with `helm upgrade` alone. The chart runs this in a pre-install/pre-upgrade hook Job
(templates/crds-job.yaml) with a ServiceAccount that may only touch these CRDs and is deleted with the Job.
Server-side apply with one field manager: re-applying the same files changes nothing, and fields another manager set
(a CA bundle injected by a site's tooling, say) stay.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("tpcmesh.crds")
FIELD_MANAGER = "tpcmesh-crds"


class CrdError(Exception):
    pass


def load(directory: Path) -> list[dict[str, Any]]:
    """Every document of DIR's *.yaml (also Kubernetes' ConfigMap-mounted ..data links), each a CRD; sorted by name."""
    files = sorted(p for p in directory.glob("*.yaml") if p.is_file())
    if not files:
        raise CrdError(f"{directory}: no *.yaml files (the chart mounts its crds/ there)")
    crds = []
    for path in files:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except yaml.YAMLError as e:
            raise CrdError(f"{path.name}: not YAML: {e}") from None
        for d in docs:
            if (d.get("apiVersion"), d.get("kind")) != ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
                raise CrdError(f"{path.name}: {d.get('kind')!r} {(d.get('metadata') or {}).get('name')!r} is not an "
                               "apiextensions.k8s.io/v1 CustomResourceDefinition: only CRDs are applied")
            crds.append(d)
    return sorted(crds, key=lambda d: d["metadata"]["name"])


def established(crd: Any) -> bool:
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def apply(api: Any, crds: list[dict[str, Any]], timeout: float = 60) -> None:
    """Apply each (forcing our field manager's ownership), then wait for Established."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    for crd in crds:
        name = crd["metadata"]["name"]
        ext.patch_custom_resource_definition(name, crd, field_manager=FIELD_MANAGER, force=True,
                                             _content_type="application/apply-patch+yaml")
        versions = ", ".join(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
        log.info("customresourcedefinition/%s applied (served: %s)", name, versions)
    deadline = time.monotonic() + timeout
    pending = [c["metadata"]["name"] for c in crds]
    while pending:
        pending = [n for n in pending if not established(ext.read_custom_resource_definition(n))]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise CrdError(f"not Established after {timeout:.0f} s: {', '.join(pending)}")
        time.sleep(0.5)
    log.info("%d CRDs Established", len(crds))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tpcmesh-apply-crds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", type=Path, help="the CRD files (the chart mounts its crds/ here)")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for Established (default 60)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from kubernetes import client, config

    try:
        crds = load(args.directory)
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        apply(client.ApiClient(), crds, args.timeout)
    except CrdError as e:
        print(f"tpcmesh-apply-crds: {e}", file=sys.stderr)
        return 1
    except client.ApiException as e:
        print(f"tpcmesh-apply-crds: the API server refused: {e.status} {e.reason}: {e.body}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
