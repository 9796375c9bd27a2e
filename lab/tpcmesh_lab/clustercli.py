"""`tpcmesh-local cluster up|demo|down`: the real cluster on this machine (cluster.py), with the chart and the quick
benchmark installed on it for `demo` (clusterinstall.py)."""

from __future__ import annotations

import logging
import signal
import sys

from . import clusterinstall
from .cluster import Cluster, ClusterError, ClusterOptions, down
from .controlplane import BIN
from .netns import LabError
from .postgres import for_cluster


def cluster_main(args) -> int:
    """`tpcmesh-local cluster up|demo|down` (argparse namespace from __main__)."""
    if args.action == "down":
        removed = down()
        print(f"Removed {len(removed)} leftovers" + (f": {', '.join(removed)}" if removed else ""))
        return 0
    logging.getLogger("tpcmesh").setLevel(logging.INFO)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("tpcmesh").addHandler(handler)
    logging.getLogger("tpcmesh").propagate = False  # printed once, by the handler above
    cluster = Cluster(ClusterOptions(nodes=args.nodes, profile=args.profile, state_dir=args.state_dir))
    database = None
    try:
        cluster.up()
        assert cluster.lab is not None and cluster.lab.subnet is not None and cluster.state is not None
        _print_cluster(cluster)
        if args.action == "demo":
            database = for_cluster(cluster.lab.host_address, cluster.lab.subnet, cluster.state / "postgres-dir")
            print(f"PostgreSQL for the dashboard: {cluster.lab.host_address}:{database.server.port} (started here)")
            url = clusterinstall.demo(cluster, database.url)
            print(f"\nThe grid: {url}\n  kubectl -n {clusterinstall.NAMESPACE} get transferbenchmarks,transferruns")
        else:
            print("  helm install tpcmesh charts/tpcmesh -n tpcmesh --create-namespace --set image.pullPolicy=Never "
                  "(PostgreSQL: see README, or `tpcmesh-local cluster demo`)")
        print("\nCtrl-C or `tpcmesh-local cluster down` ends it.")
        signal.pause()
    except (ClusterError, LabError, RuntimeError) as e:
        print(f"tpcmesh-local cluster: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        if database is not None:
            database.close()
        cluster.close()
    return 0


def _print_cluster(cluster: Cluster) -> None:
    assert cluster.lab is not None
    print(f"\nThe cluster is up: {len(cluster.nodes)} nodes")
    for n in cluster.nodes:
        print(f"  {n.name:<10} {n.address:<15} {n.address6 or '':<24} pods {n.pod_network}")
    for i, a in enumerate(cluster.nodes):
        for b in cluster.nodes[i + 1:]:
            print(f"  {a.name} <-> {b.name}: RTT {cluster.lab.profile.rtt_ms(a.name, b.name):g} ms")
    print(f"\n  export KUBECONFIG={cluster.kubeconfig} PATH={BIN}:$PATH   # kubectl and helm built here"
          "\n  kubectl get nodes -o wide")
