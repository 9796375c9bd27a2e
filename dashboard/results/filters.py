"""One FilterSet per model (django-filter)."""

from __future__ import annotations

import re

import django_filters as filters
from django import forms
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from results import models, problems, rfc3339
from results.diagnosis.limits import LIMITS
from results.protocols import PROTOCOLS


class RFC3339FormField(forms.DateTimeField):
    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return rfc3339.parse(value)
        except ValueError as err:
            # the text quotes the value, which may hold a "%": passed as a parameter, never as the format
            raise forms.ValidationError("%(problem)s", params={"problem": str(err)}) from None


@extend_schema_field({"type": "string", "format": "date-time", "pattern": rfc3339.IN_RANGE_PATTERN})
class RFC3339Filter(filters.DateTimeFilter):
    """A time as the schema declares it (RFC 3339, in the years 1 to 9999 in UTC: the pattern says which offsets
    the first and last day allow); django-filter's own takes any ISO 8601 form."""

    field_class = RFC3339FormField


class _StrictIntegerField(forms.IntegerField):
    """An integer written as one (Django's own also takes `12.0` and `1e3`-free decimals ending in zeros)."""

    def to_python(self, value):
        if isinstance(value, str) and value.strip() and not re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            raise forms.ValidationError("%(v)r is not an integer", params={"v": value})
        return super().to_python(value)


@extend_schema_field(OpenApiTypes.INT)
class IntegerFilter(filters.NumberFilter):
    field_class = _StrictIntegerField


@extend_schema_field(OpenApiTypes.DOUBLE)
class FloatFilter(filters.NumberFilter):
    field_class = forms.FloatField

    def get_max_validator(self):
        return None  # NumberFilter refuses values beyond 1e50; any finite number is a valid bound


class _BooleanField(forms.Field):
    def to_python(self, value):
        if value in self.empty_values:
            return None
        if value in ("true", "false"):
            return value == "true"
        raise forms.ValidationError("%(v)r is not a boolean: use true or false", params={"v": value})


@extend_schema_field(OpenApiTypes.BOOL)
class BooleanFilter(filters.BooleanFilter):
    """true or false, as the schema says (django-filter's own also takes 1, yes, null, unknown ...)."""

    field_class = _BooleanField


class _ChoicesField(forms.MultipleChoiceField):
    def clean(self, value):
        return super().clean([v for v in value or [] if v])


class MultipleChoiceFilter(filters.MultipleChoiceFilter):
    """Several choices (`?status=failed&status=cancelled`); an empty value is no filter, as for every other
    optional parameter (HTML forms send them)."""

    field_class = _ChoicesField


def _benchmark_q(prefix: str, value: str) -> Q:
    if "/" in value:
        namespace, name = value.split("/", 1)
        return Q(**{f"{prefix}namespace": namespace, f"{prefix}name": name})
    return Q(**{f"{prefix}name": value})


CLUSTER_HELP = "one cluster's (the operator's cluster.name)"


class NodeFilterSet(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name", help_text=CLUSTER_HELP)
    name = filters.CharFilter(field_name="name")
    name__ic = filters.CharFilter(field_name="name", lookup_expr="icontains")
    site = filters.CharFilter(field_name="site")

    class Meta:
        model = models.Node
        fields = ["name", "site"]


class BenchmarkFilterSet(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name", help_text=CLUSTER_HELP)

    class Meta:
        model = models.Benchmark
        fields = ["namespace", "name", "uid"]


class OfBenchmark(filters.FilterSet):
    """?benchmark=namespace/name (or a unique name) and ?cluster= for models with a benchmark."""

    benchmark = filters.CharFilter(method="filter_benchmark", help_text='"namespace/name" or a name')
    cluster = filters.CharFilter(field_name="benchmark__cluster__name", help_text=CLUSTER_HELP)

    def filter_benchmark(self, queryset, name, value):
        return queryset.filter(_benchmark_q("benchmark__", value))


class OfPair(OfBenchmark):
    """A pair's ends and its setting, for models with source, destination, protocol and streams."""

    source = filters.CharFilter(field_name="source__name", help_text="source node name")
    destination = filters.CharFilter(field_name="destination__name", help_text="destination node name")
    protocol = MultipleChoiceFilter(choices=[(p, p) for p in PROTOCOLS])
    streams = IntegerFilter(field_name="streams")


class RunFilterSet(OfBenchmark):
    started_after = RFC3339Filter(field_name="started_at", lookup_expr="gte")
    started_before = RFC3339Filter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = models.Run
        fields = ["uid", "name", "state"]


class MeasurementFilterSet(OfPair):
    run = filters.CharFilter(field_name="run__uid", help_text="run uid")
    status = MultipleChoiceFilter(choices=[(s, s) for s in models.STATUSES])
    finished_after = RFC3339Filter(field_name="finished_at", lookup_expr="gte")
    finished_before = RFC3339Filter(field_name="finished_at", lookup_expr="lt")
    min_throughput_gbps = FloatFilter(field_name="throughput_gbps", lookup_expr="gte")
    congestion_control = filters.CharFilter(field_name="congestion_control",
                                            help_text="the congestion control the test asked for (cubic, bbr)")
    address_family = filters.ChoiceFilter(choices=[(f, f) for f in models.ADDRESS_FAMILIES],
                                          help_text="the IP version the test ran over")
    storage_setting = filters.ChoiceFilter(choices=[(s, s) for s in models.STORAGE_SETTINGS],
                                           help_text="where the ends kept the files (memory, disk, disk-to-memory, "
                                                     "memory-to-disk)")
    retransmits_min = IntegerFilter(field_name="retransmits", lookup_expr="gte",
                                    help_text="at least this many TCP retransmits (senders' total)")
    auth = MultipleChoiceFilter(choices=[(a, a) for a in models.AUTH_MODES],
                                help_text="how the copy was authorised (token, x509, none; HTTP-based protocols)")
    # not `limit`: that is the page size (limit/offset pagination)
    binding_limit = MultipleChoiceFilter(choices=[(x, x) for x in LIMITS],
                                         help_text="the bound the measurement ran into (results.diagnosis)")
    efficiency_max = FloatFilter(field_name="efficiency", lookup_expr="lte",
                                 help_text="at most this share of the pair's path capacity")

    class Meta:
        model = models.Measurement
        fields = ["benchmark", "run", "source", "destination", "protocol", "streams", "status"]


class ApiTokenFilterSet(filters.FilterSet):
    class Meta:
        model = models.ApiToken
        fields = ["name", "write", "enabled"]


class EitherEnd(filters.FilterSet):
    """?node=: rows with that node at either end of their pair."""

    node = filters.CharFilter(method="filter_node", help_text="either end of the pair")

    def filter_node(self, queryset, name, value):
        return queryset.filter(Q(source__name=value) | Q(destination__name=value))


class ChangeFilterSet(OfPair, EitherEnd):
    metric = MultipleChoiceFilter(choices=[(m, m) for m in models.METRICS])
    worse = BooleanFilter(field_name="worse", help_text="true: only drops in throughput / rises in RTT")
    since = RFC3339Filter(field_name="at", lookup_expr="gte")
    until = RFC3339Filter(field_name="at", lookup_expr="lt")
    # a cell's other keys (results.selectors.Pick): each a setting of its own, like streams
    address_family = filters.ChoiceFilter(choices=[(f, f) for f in models.ADDRESS_FAMILIES],
                                          help_text="the IP version of the cell")
    storage_setting = filters.ChoiceFilter(choices=[(s, s) for s in models.STORAGE_SETTINGS],
                                           help_text="the cell's storage (memory, disk, disk-to-memory, "
                                                     "memory-to-disk)")
    congestion_control = filters.CharFilter(field_name="congestion_control",
                                            help_text="the cell's congestion control (empty: the nodes' default)")
    auth = MultipleChoiceFilter(choices=[(a, a) for a in models.AUTH_MODES],
                                help_text="the cell's authorization mode (token, x509, none)")

    class Meta:
        model = models.Change
        fields = ["benchmark", "source", "destination", "protocol", "streams", "metric", "worse"]


class PathFilterSet(OfBenchmark, EitherEnd):
    source = filters.CharFilter(field_name="source__name", help_text="source node name")
    destination = filters.CharFilter(field_name="destination__name", help_text="destination node name")
    run = filters.CharFilter(field_name="measurement__run__uid", help_text="run uid")
    changed = BooleanFilter(field_name="changed", help_text="true: hops differ from the pair's previous path")
    pmtu_reduced = BooleanFilter(field_name="pmtu_reduced",
                                 help_text="true: the path MTU is smaller than the source interface's MTU")
    reached = BooleanFilter(field_name="reached")
    since = RFC3339Filter(field_name="at", lookup_expr="gte")
    until = RFC3339Filter(field_name="at", lookup_expr="lt")

    class Meta:
        model = models.Path
        fields = ["benchmark", "source", "destination", "run", "changed", "pmtu_reduced", "reached"]


class ProblemFilterSet(OfBenchmark):
    kind = MultipleChoiceFilter(choices=[(k, k) for k in problems.KINDS])
    severity = MultipleChoiceFilter(choices=[(s, s) for s in models.SEVERITIES])
    active = BooleanFilter(field_name="resolved_at", lookup_expr="isnull",
                                   help_text="true: not resolved (default: every problem)")

    class Meta:
        model = models.Problem
        fields = ["benchmark", "kind", "severity", "active"]


class MaintenanceFilterSet(filters.FilterSet):
    node = filters.CharFilter(method="filter_node", help_text="windows on this node, as a node or an end of a pair")
    cluster = filters.CharFilter(method="filter_cluster", help_text="windows on this cluster's nodes")
    active = BooleanFilter(method="filter_active", help_text="true: in force now")

    class Meta:
        model = models.Maintenance
        fields = ["node", "active"]

    def filter_node(self, queryset, name, value):
        return queryset.filter(Q(node__name=value) | Q(source__name=value) | Q(destination__name=value))

    def filter_cluster(self, queryset, name, value):
        return queryset.filter(Q(node__cluster__name=value) | Q(source__cluster__name=value)
                               | Q(destination__cluster__name=value))

    def filter_active(self, queryset, name, value):
        from django.utils import timezone

        now = timezone.now()
        live = Q(starts_at__lte=now, ends_at__gt=now)
        return queryset.filter(live) if value else queryset.exclude(live)
