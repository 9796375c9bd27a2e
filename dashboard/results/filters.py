"""One FilterSet per model (django-filter)."""

from __future__ import annotations

import django_filters as filters
from django.db.models import Q

from results.models import PROTOCOLS, STATUSES, ApiToken, Benchmark, Measurement, Node, Run


def _benchmark_q(prefix: str, value: str) -> Q:
    if "/" in value:
        namespace, name = value.split("/", 1)
        return Q(**{f"{prefix}namespace": namespace, f"{prefix}name": name})
    return Q(**{f"{prefix}name": value})


class NodeFilterSet(filters.FilterSet):
    name = filters.CharFilter(field_name="name")
    name__ic = filters.CharFilter(field_name="name", lookup_expr="icontains")
    site = filters.CharFilter(field_name="site")

    class Meta:
        model = Node
        fields = ["name", "site"]


class BenchmarkFilterSet(filters.FilterSet):
    class Meta:
        model = Benchmark
        fields = ["namespace", "name", "uid"]


class RunFilterSet(filters.FilterSet):
    benchmark = filters.CharFilter(method="filter_benchmark", help_text='"namespace/name" or a name')
    started_after = filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    started_before = filters.IsoDateTimeFilter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = Run
        fields = ["uid", "name", "state"]

    def filter_benchmark(self, queryset, name, value):
        return queryset.filter(_benchmark_q("benchmark__", value))


class MeasurementFilterSet(filters.FilterSet):
    benchmark = filters.CharFilter(method="filter_benchmark", help_text='"namespace/name" or a name')
    run = filters.CharFilter(field_name="run__uid", help_text="run uid")
    source = filters.CharFilter(field_name="source__name", help_text="source node name")
    destination = filters.CharFilter(field_name="destination__name", help_text="destination node name")
    protocol = filters.MultipleChoiceFilter(choices=[(p, p) for p in PROTOCOLS])
    streams = filters.NumberFilter(field_name="streams")
    status = filters.MultipleChoiceFilter(choices=[(s, s) for s in STATUSES])
    finished_after = filters.IsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = filters.IsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")
    min_throughput_gbps = filters.NumberFilter(field_name="throughput_gbps", lookup_expr="gte")

    class Meta:
        model = Measurement
        fields = ["benchmark", "run", "source", "destination", "protocol", "streams", "status"]

    def filter_benchmark(self, queryset, name, value):
        return queryset.filter(_benchmark_q("benchmark__", value))


class ApiTokenFilterSet(filters.FilterSet):
    class Meta:
        model = ApiToken
        fields = ["name", "write", "enabled"]
