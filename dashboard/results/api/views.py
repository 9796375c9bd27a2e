"""Thin API views: parse, call a selector or service, serialize."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.serializers import ModelSerializer
from rest_framework.views import APIView

from results import analysis, federation, filters, metrics, params, rfc3339, scope, selectors, services
from results.api import compiled, serializers
from results.api.errors import flatten_errors
from results.api.pagination import LARGEST
from results.api.permissions import ActAccess, WriteAccess, actor
from results.api.renderers import CSVRenderer, csv_lines
from results.contract import contract_errors, passes
from results.diagnosis.limits import LIMITS
from results.models import (
    ADDRESS_FAMILIES,
    AUTH_MODES,
    DEFAULT_CLUSTER,
    STORAGE_SETTINGS,
    Benchmark,
    Change,
    Maintenance,
    Measurement,
    Node,
    Path,
    Problem,
)
from results.protocols import PROTOCOLS
from results.stats import advice

LIST_RENDERERS = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

# Query parameters' schemas, as the views parse them (results.params).
NAME = {"type": "string", "minLength": 1}
PROTOCOL = {"type": "string", "enum": list(PROTOCOLS)}
DURATION = {"type": "string", "pattern": params.DURATION_PATTERN}
FAMILY = {"type": "string", "enum": list(ADDRESS_FAMILIES)}
CONGESTION = {"type": "string", "pattern": params.CONGESTION_PATTERN}
AUTH = {"type": "string", "enum": list(AUTH_MODES)}
STORAGE = {"type": "string", "enum": list(STORAGE_SETTINGS)}


def _streams(lo: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": 100}


# the grid's streams: a count, or each link's newest cell whatever its streams (a tuned benchmark, spec.optimize)
GRID_STREAMS = {"oneOf": [_streams(0), {"type": "string", "enum": [params.NEWEST_STREAMS]}]}



CLUSTER = OpenApiParameter("cluster", NAME, description="one cluster's (the operator's cluster.name); "
                           "default: a benchmark or node name unique across clusters")


def _cluster(request) -> str | None:
    return _params(params.name, "cluster", request.query_params.get("cluster")) \
        if request.query_params.get("cluster") else None


def _benchmark(request) -> Benchmark:
    ref = _params(params.name, "benchmark", request.query_params.get("benchmark"))
    cluster = _cluster(request)
    try:
        return selectors.get_benchmark(ref, cluster)
    except Benchmark.DoesNotExist:
        where = f" in cluster {cluster!r}" if cluster else ""
        raise NotFound(f"benchmark {ref!r} not found{where} (use namespace/name)") from None
    except Benchmark.MultipleObjectsReturned:
        raise NotFound(f"benchmark {ref!r} is not unique (use namespace/name, and cluster= when several clusters "
                       "have it)") from None


def _grid_benchmarks(request) -> list[Benchmark]:
    """The grid's benchmarks: one cluster's (cluster=), or every cluster's of that namespace/name combined."""
    ref = _params(params.name, "benchmark", request.query_params.get("benchmark"))
    cluster = _cluster(request)
    if "/" not in ref:
        return [_benchmark(request)]
    benches = selectors.benchmarks_named(*ref.split("/", 1), cluster)
    if not benches:
        where = f" in cluster {cluster!r}" if cluster else ""
        raise NotFound(f"benchmark {ref!r} not found{where} (use namespace/name)")
    return benches


def _may_write(request, cluster: str, record: str) -> None:
    """403 naming why when the request's token is scoped to another cluster than the record's."""
    try:
        scope.check(request.auth, cluster, record)
    except scope.OtherCluster as err:
        raise PermissionDenied(str(err)) from None


def _window_clusters(window: Maintenance) -> set[str]:
    return {n.cluster.name for n in (window.node, window.source, window.destination) if n is not None}


def _params(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except params.ParamError as err:
        raise ValidationError({err.param: err.message}) from None


@cache
def _measurements_converter() -> compiled.Convert:
    return compiled.field_converter(serializers.IngestBatchIn().fields["measurements"])


def _valid_batch(data: object) -> dict | None:
    """A batch's validated data the quick way: the contract accepts it (compiled, results.contract), DRF checks
    the small rest (benchmark, run, nodes) and the measurements go through their serializer compiled
    (results.api.compiled), which gives DRF's validated data for them without its per-field pass (most of an
    ingest's CPU). None when any of it declines: the caller validates the usual way, for the errors."""
    if type(data) is not dict or not passes("ingestBatch", data):
        return None
    rest = serializers.IngestBatchIn(data={**data, "measurements": []})
    if not rest.is_valid():
        return None
    try:
        measurements = _measurements_converter()(data.get("measurements"))
    except compiled.Declined:
        return None
    return {**rest.validated_data, "measurements": measurements}


class IngestView(APIView):
    """Bulk ingest of one run's measurements (the contract's ingestBatch); idempotent by measurement id."""

    permission_classes = [WriteAccess]

    @extend_schema(request=None, responses={200: serializers.IngestResultOut})  # body: results.api.openapi
    def post(self, request):
        batch = _valid_batch(request.data)
        if batch is None:  # invalid, or the quick way declined: DRF and the contract say what is wrong, and where
            serializer = serializers.IngestBatchIn(data=request.data)
            if not serializer.is_valid():
                metrics.INGEST_REJECTED.labels(reason="invalid").inc()
                return Response({"detail": "Invalid ingest batch.", "errors": flatten_errors(serializer.errors)},
                                status=status.HTTP_400_BAD_REQUEST)
            errors = contract_errors("ingestBatch", request.data)
            if errors:
                metrics.INGEST_REJECTED.labels(reason="contract").inc()
                return Response({"detail": "Ingest batch violates measurement.v1.schema.json.", "errors": errors},
                                status=status.HTTP_400_BAD_REQUEST)
            batch = serializer.validated_data
        try:
            result = services.ingest(batch, request.auth)
        except scope.OtherCluster as err:
            metrics.INGEST_REJECTED.labels(reason="cluster").inc()
            raise PermissionDenied(str(err)) from None
        return Response({"created": result.created, "duplicates": result.duplicates, "ids": result.ids})


class CSVExportMixin:
    """`?format=csv` on a list: the whole filtered, ordered set streamed (no pagination), at most CSV_MAX_ROWS
    rows per request (`X-CSV-Max-Rows`); `offset` and a smaller `limit` still apply. When the cap cuts the
    export short, a last line starting with # says so and where to continue."""

    def list(self, request, *args, **kwargs):
        if request.accepted_renderer.format != "csv":
            return super().list(request, *args, **kwargs)
        cap = settings.CSV_MAX_ROWS
        q = request.query_params
        offset = _params(params.integer, "offset", q.get("offset"), 0, 0, LARGEST)
        limit = _params(params.integer, "limit", q.get("limit"), cap, 1, LARGEST)
        take = min(limit, cap)
        queryset = self.filter_queryset(self.get_queryset())
        serializer = self.get_serializer()
        # One row beyond the cap tells csv_lines that the cap, not the data (or the asked limit), ended it.
        end = offset + take + (1 if take == cap else 0)
        rows = (serializer.to_representation(obj) for obj in queryset[offset:end].iterator(chunk_size=2000))
        trailer = (f"# truncated: this export stops at {cap} rows (TPCMESH_DASHBOARD_CSV_MAX_ROWS); continue with "
                   f"offset={offset + cap} or narrow the filters\n")
        response = StreamingHttpResponse(csv_lines(list(serializer.fields), rows, take, trailer),
                                         content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{self.basename}.csv"'
        response["X-CSV-Max-Rows"] = str(cap)
        return response


class ArchiveViewSet(CSVExportMixin, viewsets.ReadOnlyModelViewSet):
    """A read-only list and detail, JSON or CSV. Any id reaches the view, which answers a JSON 404 for one that
    is not a number (the router's default pattern stops at a dot and left Django's HTML 404 page)."""

    lookup_value_regex = "[^/]+"
    renderer_classes = LIST_RENDERERS


def _rows_read(serializer: type[ModelSerializer]) -> list[str]:
    """The related rows a model serializer's fields read, as select_related paths: a field whose source is
    "benchmark.cluster.name" reads the benchmark and its cluster."""
    paths = []
    for field in serializer().fields.values():
        model, path = serializer.Meta.model, []
        for attr in field.source.split("."):
            try:
                relation = model._meta.get_field(attr)
            except FieldDoesNotExist:  # a column, a method, or "*"
                break
            if not (relation.many_to_one or relation.one_to_one):
                break
            path.append(attr)
            model = relation.related_model
        if path:
            paths.append("__".join(path))
    return paths


def archive_viewset(serializer: type[ModelSerializer], filterset: type, ordering: list[str]) -> type[ArchiveViewSet]:
    """A plain archive resource: the serializer's model joined to the rows its fields read, its filters, and the
    fields a list may be ordered by."""
    model = serializer.Meta.model
    return type(f"{model.__name__}ViewSet", (ArchiveViewSet,), {
        "__module__": __name__, "queryset": model.objects.select_related(*_rows_read(serializer)),
        "serializer_class": serializer, "filterset_class": filterset, "ordering_fields": ordering})


NodeViewSet = archive_viewset(serializers.NodeSerializer, filters.NodeFilterSet, ["name", "site", "last_seen"])
BenchmarkViewSet = archive_viewset(serializers.BenchmarkSerializer, filters.BenchmarkFilterSet,
                                   ["namespace", "name", "created"])
RunViewSet = archive_viewset(serializers.RunSerializer, filters.RunFilterSet, ["started_at", "finished_at", "name"])


class MeasurementViewSet(ArchiveViewSet):
    # The related rows give names only: their JSON columns would be decoded for nothing on every row.
    queryset = Measurement.objects.select_related("source", "destination", "run", "benchmark__cluster").defer(
        "source__labels", "destination__labels", "run__counts", "benchmark__spec", "benchmark__thresholds")
    filterset_class = filters.MeasurementFilterSet
    ordering_fields = ["finished_at", "started_at", "throughput_gbps", "rtt_ms", "protocol", "streams"]
    ordering = ["-finished_at", "id"]  # id: a stable order for offset paging and CSV continuation

    def get_serializer_class(self):
        if self.action == "retrieve":
            return serializers.MeasurementDetailSerializer
        return serializers.MeasurementSerializer


class GridView(APIView):
    """The mesh grid of one benchmark and protocol: per source × destination, the latest value or a window's
    mean/median, with its age."""

    @extend_schema(
        parameters=[
            OpenApiParameter("benchmark", NAME, required=True, description="namespace/name"),
            OpenApiParameter("cluster", NAME, description="one cluster's grid; default: every cluster's benchmark "
                             "of that namespace/name in one grid, its nodes named cluster:node when there are "
                             "several"),
            OpenApiParameter("protocol", PROTOCOL, required=True),
            OpenApiParameter("streams", GRID_STREAMS, description=(
                "one stream setting (default: all); newest: each link's newest cell whatever its streams (a "
                "benchmark with optimize: true, whose links run the streams × files tuned for each), its cells "
                "naming the concurrency it ran too; with mode mean or median each link's aggregate of its newest "
                "cell's streams")),
            OpenApiParameter("address_family", FAMILY, description="one address family (default: both)"),
            OpenApiParameter("congestion_control", CONGESTION,
                             description="one congestion control; default: the nodes' own (default: all)"),
            OpenApiParameter("auth", AUTH, description="one auth mode (token, x509, none); default: the "
                             "protocol's newest mode (a protocol without modes: its cells, auth \"\")"),
            OpenApiParameter("storage", STORAGE, description=(
                "one storage setting: memory (memory to memory), disk (disk to disk), disk-to-memory, "
                "memory-to-disk; default: all")),
            OpenApiParameter("mode", str, enum=list(selectors.GRID_MODES)),
            OpenApiParameter("window", DURATION, description="for mean/median: 3600, 30m, 12h, 7d (default 7d)"),
            # not `limit`, the page size elsewhere: the measurements API's name for the same filter
            OpenApiParameter("binding_limit", {"type": "string", "enum": list(LIMITS)}, many=True, explode=True,
                             description="only the cells whose newest measurement ran into one of these limits "
                                         "(repeat it for several); default: every cell"),
        ],
        responses=serializers.GridSerializer,
    )
    def get(self, request):
        benches = _grid_benchmarks(request)
        q = request.query_params
        protocol = _params(params.protocol, "protocol", q.get("protocol"))
        streams = _params(params.streams, "streams", q.get("streams"))
        family = _params(params.choice, "address_family", q.get("address_family"), tuple(ADDRESS_FAMILIES), None)
        cc = _params(params.congestion_control, "congestion_control", q.get("congestion_control"))
        auth = _params(params.choice, "auth", q.get("auth"), tuple(AUTH_MODES), "")
        storage = _params(params.choice, "storage", q.get("storage"), tuple(STORAGE_SETTINGS), None)
        mode = _params(params.choice, "mode", q.get("mode"), selectors.GRID_MODES, "latest")
        window = _params(params.duration, "window", q.get("window"), timedelta(days=7))
        limits = tuple(_params(params.choice, "binding_limit", x, LIMITS, "")
                       for x in q.getlist("binding_limit") if x)
        wanted = limits or None
        # one auth mode at a time: a benchmark whose spec.auth changed shows its current mode unless asked
        auth = auth or selectors.newest_auth(benches, protocol)
        if len(benches) > 1:
            return Response(grid_json(federation.combined_grid(benches, protocol, streams=streams, mode=mode,
                                                               window=window, address_family=family,
                                                               congestion_control=cc, auth=auth,
                                                               binding_limits=wanted, storage=storage)))
        bench = benches[0]
        # a filtered grid is built in Python: the database's JSON is the whole grid's
        fast = connection.vendor == "postgresql" and request.accepted_renderer.format == "json" and not wanted
        data = selectors.grid(bench, protocol, streams=streams, mode=mode, window=window, cells_json=fast,
                              address_family=family, congestion_control=cc, auth=auth, binding_limits=wanted,
                              storage=storage)
        if fast:
            # The database built the cells' JSON; splice it into the envelope without re-parsing.
            # Pieces, not one concatenated text: HttpResponse joins them as bytes in one copy (the cells of 100×100
            # of every setting are ~12 MB; each concatenation of texts, and their encoding, copied them again).
            head = json.dumps({k: v for k, v in grid_json({**data, "cells": []}).items() if k != "cells"})
            return HttpResponse([head[:-1] + ', "cells": ', data["cells_json"], "}"], content_type="application/json")
        return Response(grid_json(data))


_iso = rfc3339.format_utc


def grid_json(data: dict) -> dict:
    """The grid as GridSerializer documents it, built directly: a DRF serializer costs ~30 ms per 1 000 cells,
    too slow for a 100×100 grid (10 000 cells) in the latency budget."""
    return {
        **{k: data[k] for k in ("benchmark", "clusters", "protocol", "kind", "metric", "unit", "mode", "window_seconds",
                                "thresholds", "efficiency_thresholds", "nodes")},
        "generated_at": _iso(data["generated_at"]),
        "cells": [{**c, "finished_at": _iso(c["finished_at"])} for c in data["cells"]],
    }


def _node(name: str | None, param: str) -> Node:
    ref = _params(params.name, param, name)
    try:
        return selectors.get_node(ref)
    except Node.DoesNotExist:
        raise NotFound(f"{param}: node {ref!r} not found") from None
    except Node.MultipleObjectsReturned:
        raise ValidationError({param: f"node {ref!r} is in several clusters: name it cluster:node"}) from None


class PairHistoryView(APIView):
    """Every measurement between two nodes, both directions, oldest first."""

    @extend_schema(
        parameters=[
            OpenApiParameter("source", NAME, required=True),
            OpenApiParameter("destination", NAME, required=True),
            OpenApiParameter("benchmark", str, description="namespace/name (default: every benchmark)"),
            CLUSTER,
            OpenApiParameter("since", DURATION, description="how far back: 30d (default 90d)"),
        ],
        responses=serializers.HistoryPointSerializer(many=True),
    )
    def get(self, request):
        q = request.query_params
        a, b = _node(q.get("source"), "source"), _node(q.get("destination"), "destination")
        bench = _benchmark(request) if q.get("benchmark") else None
        since = _params(params.duration, "since", q.get("since"), timedelta(days=90))
        points = selectors.pair_history(a, b, bench, since=timezone.now() - since)
        point = compiled.representer(serializers.HistoryPointSerializer)  # its .data, without DRF's loop
        return Response([point(p) for p in points])


class ThroughputVsRttView(APIView):
    """Latest throughput of every pair against its RTT, per protocol."""

    @extend_schema(
        parameters=[OpenApiParameter("benchmark", NAME, required=True, description="namespace/name"), CLUSTER],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        data = selectors.throughput_vs_rtt(_benchmark(request))
        return Response({p: serializers.RttPointSerializer(v, many=True).data for p, v in data.items()})


class StreamsPairsView(APIView):
    """Pairs measured with a low and a high stream count (default 1 and 8): both latest throughputs."""

    @extend_schema(
        parameters=[
            OpenApiParameter("benchmark", NAME, required=True, description="namespace/name"),
            CLUSTER,
            OpenApiParameter("protocol", PROTOCOL),
            OpenApiParameter("low", _streams(1), description="default 1"),
            OpenApiParameter("high", _streams(1), description="default 8"),
        ],
        responses=serializers.StreamsPairSerializer(many=True),
    )
    def get(self, request):
        q = request.query_params
        bench = _benchmark(request)
        protocol = _params(params.protocol, "protocol", q["protocol"]) if q.get("protocol") else None
        low = _params(params.integer, "low", q.get("low"), 1, 1, 100)
        high = _params(params.integer, "high", q.get("high"), 8, 1, 100)
        data = selectors.streams_pairs(bench, protocol, low, high)
        return Response(serializers.StreamsPairSerializer(data, many=True).data)


class ChangeViewSet(ArchiveViewSet):
    """Step changes found in each cell's history (throughput or RTT; not outliers, not threshold crossings)."""

    queryset = Change.objects.select_related("benchmark__cluster", "source", "destination").defer(
        "benchmark__spec", "benchmark__thresholds", "source__labels", "destination__labels")
    serializer_class = serializers.ChangeSerializer
    filterset_class = filters.ChangeFilterSet
    ordering_fields = ["at", "detected_at"]
    ordering = ["-at", "id"]


class PathViewSet(ArchiveViewSet):
    """The path each probe test traced from the source to the destination (tracepath): hops, path MTU, the source
    interface's MTU, whether the path MTU is smaller, and whether the hops changed since the pair's previous path."""

    queryset = Path.objects.select_related("benchmark", "source", "destination", "measurement__run").defer(
        "benchmark__spec", "benchmark__thresholds", "source__labels", "destination__labels",
        "measurement__run__counts")
    serializer_class = serializers.PathSerializer
    filterset_class = filters.PathFilterSet
    ordering_fields = ["at", "hop_count", "pmtu"]
    ordering = ["-at", "id"]


class ProblemViewSet(ArchiveViewSet):
    """Problems the rules found in the grids (results.problems), with their acknowledgement."""

    queryset = Problem.objects.select_related("benchmark__cluster").defer("benchmark__spec", "benchmark__thresholds")
    serializer_class = serializers.ProblemSerializer
    filterset_class = filters.ProblemFilterSet
    ordering_fields = ["first_seen", "last_seen", "severity"]
    permission_classes = [ActAccess]
    parser_classes = [JSONParser]  # a form encoding would drop what it cannot say (a field of a wrong type)
    acting_model = Problem
    acting_permission = "change"

    @extend_schema(request=serializers.AcknowledgeIn, responses=serializers.ProblemSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request, pk=None):
        """Acknowledge the problem as it is now (its cells and severity): it stays listed but stops alerting
        until it changes."""
        problem = self.get_object()
        _may_write(request, problem.benchmark.cluster.name, f"problem {problem.pk} of {problem.benchmark}")
        body = serializers.AcknowledgeIn(data=request.data)
        if not body.is_valid():
            raise ValidationError(flatten_errors(body.errors))
        services.acknowledge(problem, actor(request), body.validated_data["note"])
        return Response(serializers.ProblemSerializer(problem).data)

    @extend_schema(request=serializers.EvaluateIn, responses=serializers.EvaluateOut)
    @action(detail=False, methods=["post"])
    def evaluate(self, request):
        """Diagnose a benchmark's newest cells and run the problem rules on them now (what the analysis does after
        each ingest, in the background), then answer its open problems: the operator asks this once a run is
        delivered, for the run's MeshHealthy condition."""
        body = serializers.EvaluateIn(data=request.data)
        if not body.is_valid():
            raise ValidationError(flatten_errors(body.errors))
        data = body.validated_data
        try:
            cluster = scope.batch_cluster(request.auth, data.get("cluster") or None, DEFAULT_CLUSTER)
        except scope.OtherCluster as err:
            raise PermissionDenied(str(err)) from None
        bench = Benchmark.objects.filter(cluster__name=cluster, namespace=data["namespace"],
                                         name=data["name"]).first()
        if bench is None:
            raise NotFound(f"no benchmark {data['namespace']}/{data['name']} of cluster {cluster} in the archive "
                           "(nothing of it was ingested yet)")
        found = analysis.evaluate(bench)
        return Response(serializers.EvaluateOut({"benchmark": f"{bench.namespace}/{bench.name}", "cluster": cluster,
                                                 "problems": found}).data)

    @extend_schema(request=None, responses=serializers.ProblemSerializer)
    @action(detail=True, methods=["post"])
    def unacknowledge(self, request, pk=None):
        problem = self.get_object()
        _may_write(request, problem.benchmark.cluster.name, f"problem {problem.pk} of {problem.benchmark}")
        services.acknowledge(problem, actor(request), None)
        return Response(serializers.ProblemSerializer(problem).data)


class MaintenanceViewSet(CSVExportMixin, viewsets.ModelViewSet):
    """Maintenance windows of nodes and pairs: their cells show the maintenance colour, raise no problem, and the
    operator leaves them out of runs while they last. DELETE ends a window now (it stays in the history)."""

    lookup_value_regex = "[^/]+"
    renderer_classes = LIST_RENDERERS
    queryset = Maintenance.objects.select_related("node__cluster", "source__cluster", "destination__cluster")
    serializer_class = serializers.MaintenanceSerializer
    filterset_class = filters.MaintenanceFilterSet
    ordering_fields = ["starts_at", "ends_at"]
    permission_classes = [ActAccess]
    parser_classes = [JSONParser]
    acting_model = Maintenance
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_renderers(self):
        if self.request is not None and self.request.method not in ("GET", "HEAD"):
            return [JSONRenderer()]  # CSV is for reading the list
        return super().get_renderers()

    def perform_create(self, serializer):
        data = serializer.validated_data
        for node in (data.get("node"), data.get("source"), data.get("destination")):
            if node is not None:
                _may_write(self.request, node.cluster.name, f"node {node.name!r} (a maintenance window on it)")
        window = serializer.save(created_by=actor(self.request))
        services.maintenance_changed(window)

    def perform_destroy(self, instance):
        for cluster in sorted(_window_clusters(instance)):
            _may_write(self.request, cluster, f"maintenance window {instance.pk}")
        services.end_maintenance(instance)
ADVISED = [p for p in PROTOCOLS if p != "rtt"]  # what moves bytes, with streams and files to tune


def _bound(q, name: str, default: int, hi: int) -> int:
    value = _params(params.integer, name, q.get(name), default, 1, hi)
    assert value is not None
    return value


class AdviceView(APIView):
    """Advice for one link (source → destination, one protocol), from its memory-to-memory runs (a failed one
    counts as 0 Gbit/s, a cancelled one not at all, a disk mode one measures its disks too): each streams ×
    concurrency setting's median with its 95 % interval, the best, the knee (the cheapest setting within 5 % of the
    best: beyond it more streams or files stop helping), and the setting for the next run within the given bounds,
    by the rule of results.stats.advice (what a benchmark with `optimize: true` runs next)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("source", NAME, required=True),
            OpenApiParameter("destination", NAME, required=True),
            OpenApiParameter("protocol", {"type": "string", "enum": ADVISED}, required=True),
            OpenApiParameter("benchmark", str, description="namespace/name (default: every benchmark)"),
            CLUSTER,
            OpenApiParameter("since", DURATION, description="how far back: 30d (default 90d)"),
            OpenApiParameter("streams_max", _streams(1), description="next run: most streams (default 16)"),
            OpenApiParameter("concurrency_max", {"type": "integer", "minimum": 1, "maximum": 1000},
                             description="next run: most files at once (default 16)"),
            OpenApiParameter("concurrency_step", {"type": "integer", "minimum": 1, "maximum": 1000},
                             description="next run: files change by this step (default 1)"),
            OpenApiParameter("connections_max", {"type": "integer", "minimum": 1, "maximum": 100000},
                             description="next run: most streams × files (default 1024, the agent's limit)"),
        ],
        responses=serializers.AdviceOut,
    )
    def get(self, request):
        q = request.query_params
        protocol = _params(params.choice, "protocol", q.get("protocol"), tuple(ADVISED), "")
        if not protocol:
            raise ValidationError({"protocol": "is required"})
        since = _params(params.duration, "since", q.get("since"), timedelta(days=90))
        bounds = advice.Bounds(streams_max=_bound(q, "streams_max", 16, 100),
                               concurrency_max=_bound(q, "concurrency_max", 16, 1000),
                               concurrency_step=_bound(q, "concurrency_step", 1, 1000),
                               connections_max=_bound(q, "connections_max", 1024, 100_000))
        source, destination = _node(q.get("source"), "source"), _node(q.get("destination"), "destination")
        bench = _benchmark(request) if q.get("benchmark") else None
        history = selectors.link_observations(source, destination, protocol, bench, since=timezone.now() - since)
        return Response(advice_json(source.name, destination.name, protocol, bench, history, bounds))


def _setting(s: advice.Setting) -> dict[str, int]:
    return {"streams": s.streams, "concurrency": s.concurrency}


def advice_json(source: str, destination: str, protocol: str, bench: Benchmark | None,
                history: list[advice.Observation], bounds: advice.Bounds) -> dict:
    """The answer AdviceOut documents."""
    found = advice.advise(history)
    step = advice.next_settings(history, bounds)
    return {
        "source": source, "destination": destination, "protocol": protocol,
        "benchmark": str(bench) if bench else None, "runs": len(history), "margin": found.margin,
        "settings": [{**_setting(lv.setting), "runs": lv.runs, "median_gbps": lv.median,
                      "low_gbps": lv.level.low if lv.level else None,
                      "high_gbps": lv.level.high if lv.level else None,
                      "best": lv.setting == found.best, "knee": lv.setting == found.knee} for lv in found.settings],
        "best": _setting(found.best) if found.best else None, "knee": _setting(found.knee) if found.knee else None,
        "reason": found.reason,
        "bounds": {"streams_max": bounds.streams_max, "concurrency_max": bounds.concurrency_max,
                   "concurrency_step": bounds.concurrency_step, "connections_max": bounds.connections_max},
        "next": {**_setting(step.setting), "action": step.action, "reason": step.reason,
                 "current": _setting(step.current)},
    }
