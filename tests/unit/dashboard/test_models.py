"""Models: constraints the database enforces, token hashing, thresholds."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, transaction
from results import services
from results.models import ApiToken, Benchmark, Measurement, Node, Run, hash_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    bench = Benchmark.objects.create(namespace="ns", name="b")
    return Run.objects.create(benchmark=bench, uid="u1", name="r1")


def _m(run, src, dst, started, finished):
    return Measurement(run=run, benchmark=run.benchmark, source=src, destination=dst, protocol="builtin",
                       status="succeeded", started_at=started, finished_at=finished)


def test_measurement_between_a_node_and_itself_is_refused_by_the_database(run):
    a = Node.objects.create(name="a")
    now = datetime.now(UTC)
    with pytest.raises(IntegrityError), transaction.atomic():
        _m(run, a, a, now, now).save()


def test_measurement_finishing_before_it_started_is_refused_by_the_database(run):
    a, b = Node.objects.create(name="a"), Node.objects.create(name="b")
    now = datetime.now(UTC)
    with pytest.raises(IntegrityError), transaction.atomic():
        _m(run, a, b, now, now - timedelta(seconds=1)).save()
    _m(run, a, b, now, now).save()
    assert Measurement.objects.count() == 1


def test_token_stores_only_the_hash():
    token, key = services.create_api_token("op", write=True)
    token.refresh_from_db()
    assert token.key_hash == hash_token(key) and key not in token.key_hash
    assert token.prefix == key[:8] and len(key) == 40
    assert ApiToken.objects.get(key_hash=hash_token(key)).write is True


def test_thresholds_merge_over_defaults():
    bench = Benchmark(namespace="n", name="b", thresholds={"goodGbps": 50, "warnRttMs": 100, "bogus": 1})
    t = bench.effective_thresholds()
    assert t["throughput"] == {"ok": 50.0, "warning": 10.0}
    assert t["latency"] == {"ok": 20.0, "warning": 100.0}
    assert set(t) == {"throughput", "latency"}


def test_benchmark_name_is_unique_per_namespace():
    Benchmark.objects.create(namespace="n", name="b")
    Benchmark.objects.create(namespace="m", name="b")
    with pytest.raises(IntegrityError), transaction.atomic():
        Benchmark.objects.create(namespace="n", name="b")
