"""Migration 0006_federation on the suite's real PostgreSQL, with rows from before it: nodes and benchmarks go to
the default cluster, names become unique per cluster (not globally), tokens stay unscoped."""

import pytest
from django.db import IntegrityError, transaction

from tests.support.migrations import latest, migrate

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BEFORE = [("results", "0005_tcp_telemetry")]
AFTER = [("results", "0006_federation")]


def test_existing_rows_go_to_the_default_cluster():
    old = migrate(BEFORE)
    try:
        Node, Benchmark = old.get_model("results", "Node"), old.get_model("results", "Benchmark")
        ApiToken = old.get_model("results", "ApiToken")
        a, b = Node.objects.create(name="a"), Node.objects.create(name="b")
        bench = Benchmark.objects.create(namespace="ns", name="mesh")
        bench.nodes.add(a, b)
        ApiToken.objects.create(name="op", key_hash="0" * 64, prefix="0", write=True)

        new = migrate(AFTER)
        Node, Benchmark = new.get_model("results", "Node"), new.get_model("results", "Benchmark")
        Cluster, ApiToken = new.get_model("results", "Cluster"), new.get_model("results", "ApiToken")
        default = Cluster.objects.get(name="default")
        assert {(n.name, n.cluster_id) for n in Node.objects.all()} == {("a", default.id), ("b", default.id)}
        assert Benchmark.objects.get(name="mesh").cluster_id == default.id
        assert ApiToken.objects.get(name="op").cluster_id is None  # an admin token, as before
        east = Cluster.objects.create(name="east")
        Node.objects.create(name="a", cluster=east)  # the same name in another cluster
        Benchmark.objects.create(namespace="ns", name="mesh", cluster=east)
        with pytest.raises(IntegrityError), transaction.atomic():
            Node.objects.create(name="a", cluster=east)
    finally:
        latest()
