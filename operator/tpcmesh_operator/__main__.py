"""`tpcmesh-operator`: run the kopf operator (handlers in tpcmesh_operator.main)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tpcmesh-operator", description=__doc__)
    p.add_argument("--namespace", "-n", action="append", default=[], help="watch these namespaces (default: all)")
    p.add_argument("--verbose", "-v", action="store_true")
    p.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="kopf liveness endpoint")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import kopf

    from .config import Settings

    namespaces = args.namespace or [n for n in Settings.from_env().namespaces.split(",") if n]
    # The handlers read the watched namespaces from the settings (a due run checks them for other active runs):
    # --namespace must not leave them meaning "every namespace", which this operator may not even list.
    os.environ["TPCMESH_OPERATOR_NAMESPACES"] = ",".join(namespaces)
    from . import main as handlers  # noqa: F401  (registers the handlers; reads the settings at import)

    asyncio.run(kopf.operator(
        clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=args.liveness,
        standalone=not Settings.from_env().peering,
    ))


if __name__ == "__main__":
    main()
