"""`tpcmesh-local`: the local mode (no cluster). `tpcmesh-local demo --help`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpcmesh-local", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a TransferBenchmark once on local agents and show the grid")
    demo.add_argument("--agents", type=int, default=4, help="how many agents (default 4)")
    demo.add_argument("--benchmark", type=Path, default=None,
                      help="TransferBenchmark YAML (default manifests/examples/quick-benchmark.yaml)")
    demo.add_argument("--profile", default=None,
                      help="WAN profile YAML or a shipped profile's name (default: the papers' 4-site profile)")
    demo.add_argument("--once", action="store_true", help="exit after the run instead of serving the grid")
    demo.add_argument("--port", type=int, default=8000, help="dashboard port on 127.0.0.1 (0: any free port)")
    demo.add_argument("--loopback", action="store_true", help="no network namespaces: loopback addresses only")
    demo.add_argument("--auth", choices=("token", "x509"), default="token",
                      help="how HTTP-TPC pulls are authorized: token (default: an issuer started here signs each "
                           "pull's read and create tokens), x509 (host certificates alone)")
    demo.add_argument("--state-dir", type=Path, default=None,
                      help="keep certificates, logs, the SQLite database and the run status here")
    sub.add_parser("cleanup", help="remove network namespaces, devices and data directories left by killed local runs")
    cluster = sub.add_parser("cluster", help="a real multi-node Kubernetes cluster on this machine (root)")
    csub = cluster.add_subparsers(dest="action", required=True)
    for action, text in (("up", "start it and keep it until Ctrl-C or `cluster down`"),
                         ("demo", "start it, install the chart with a PostgreSQL started here, run the quick benchmark "
                                  "and print the grid's URL; keep it until Ctrl-C")):
        up = csub.add_parser(action, help=text)
        up.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
        up.add_argument("--profile", default=None,
                        help="WAN profile YAML or a shipped profile's name (default cluster)")
        up.add_argument("--state-dir", type=Path, default=None,
                        help="keep certificates, logs and the kubeconfig here (default: ~/.cache/tpcmesh/cluster/...)")
    csub.add_parser("down", help="stop a running `cluster up` and remove what killed ones left behind")
    bench = sub.add_parser("bench-fidelity", help="iperf3 vs the built-in mover on one emulated link")
    bench.add_argument("--output", type=Path, default=None, help="BENCHMARKS.md to update (default: print only)")
    bench.add_argument("--seconds", type=float, default=8.0, help="iperf3 duration")
    diag = sub.add_parser("bench-diagnosis", help="inject each cause of a slow cell on pairs of one mesh, score the "
                                                  "limit model's labels (iperf3 alone, root)")
    diag.add_argument("--pairs", type=int, default=2, help="pairs per cause (default 2)")
    diag.add_argument("--seconds", type=float, default=4.0, help="iperf3 duration per test")
    diag.add_argument("--only", default="", help="only the causes whose name contains this (e.g. loss)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "cleanup":
        from .mesh import remove_stale_data
        from .netns import remove_leftovers

        removed = remove_leftovers() + remove_stale_data()
        print(f"Removed {len(removed)} leftovers" + (f": {', '.join(removed)}" if removed else ""))
        return 0
    if args.command == "cluster":
        from .clustercli import cluster_main

        return cluster_main(args)
    if args.command == "bench-fidelity":
        from .fidelity import main as fidelity_main

        return fidelity_main(output=args.output, seconds=args.seconds)
    if args.command == "bench-diagnosis":
        from .diagnosisrun import main as diagnosis_main

        return diagnosis_main(pairs=args.pairs, seconds=args.seconds, only=args.only)
    from .demo import DEFAULT_BENCHMARK, DemoOptions, demo

    if args.agents < 2:
        print("tpcmesh-local: --agents must be at least 2 (a mesh needs pairs)", file=sys.stderr)
        return 2
    return demo(DemoOptions(agents=args.agents, benchmark=args.benchmark or DEFAULT_BENCHMARK, profile=args.profile,
                            once=args.once, port=args.port, mode="loopback" if args.loopback else "auto",
                            state_dir=args.state_dir, auth=args.auth))


if __name__ == "__main__":
    sys.exit(main())
