"""The loss mesh's API: ingest of the agents' period summaries, their list, and the windowed loss grid."""

from __future__ import annotations

import json
from datetime import UTC

import django_filters as filters
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.views import APIView

from results import params, scope
from results.api.permissions import WriteAccess
from results.api.serializers import _without_nul
from results.api.views import ArchiveViewSet, _benchmark, _params
from results.filters import CLUSTER_HELP, IntegerFilter, RFC3339Filter
from results.loss import ingest as loss_ingest
from results.loss import selectors as loss
from results.models import LossSummary


class LossIngestOut(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="summaries stored by this request")
    duplicates = serializers.IntegerField(help_text="summaries already stored (or repeated in the batch)")


class LossSummarySerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="source.cluster.name", read_only=True,
                                    help_text="the cluster of the sender's node")
    source = serializers.SlugRelatedField(slug_field="name", read_only=True, help_text="the sender (node)")
    destination = serializers.SlugRelatedField(slug_field="name", read_only=True, help_text="the reflector (peer)")
    loss_percent = serializers.SerializerMethodField(help_text="100 × lost / sent; null: nothing sent")
    detail = serializers.SerializerMethodField(help_text="the summary's other fields, as the agent sent them")

    class Meta:
        model = LossSummary
        fields = ["id", "cluster", "source", "destination", "family", "period_start", "period_end", "partial",
                  "rate_pps", "sent", "lost", "loss_percent", "duplicates", "reordered", "rtt_min_ms",
                  "rtt_median_ms", "rtt_p95_ms", "rtt_max_ms", "forward_min_ms", "forward_median_ms",
                  "backward_min_ms", "backward_median_ms", "trusted", "untrusted_reason", "ipdv_ms",
                  "ipdv_forward_ms", "ipdv_backward_ms", "detail", "ingested_at"]

    @extend_schema_field({"type": ["number", "null"]})
    def get_loss_percent(self, row: LossSummary) -> float | None:
        return round(100 * row.lost / row.sent, 6) if row.sent else None

    @extend_schema_field({"type": "object"})
    def get_detail(self, row: LossSummary) -> dict:
        return json.loads(row.detail)


class LossGridCellSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="the sender")
    destination = serializers.CharField(help_text="the reflector")
    periods = serializers.IntegerField(help_text="summaries in the window")
    sent = serializers.IntegerField()
    lost = serializers.IntegerField()
    loss_percent = serializers.FloatField(allow_null=True, help_text="100 × Σlost / Σsent over the window")
    rtt_ms = serializers.FloatField(allow_null=True, help_text="median of the periods' RTT medians")
    forward_ms = serializers.FloatField(allow_null=True, help_text=(
        "one-way delay source → destination (median of the periods' medians); null unless every period was "
        "trusted"))
    backward_ms = serializers.FloatField(allow_null=True, help_text="one-way delay destination → source; likewise")
    one_way_trusted = serializers.BooleanField(help_text="every period's clocks were synced within the bound")
    one_way_reason = serializers.CharField(allow_null=True, help_text="why the one-way delays are not given")
    jitter_ms = serializers.FloatField(allow_null=True, help_text="median of the periods' round-trip median |IPDV|")
    newest = serializers.DateTimeField(help_text="start of the newest period in the window")


assert tuple(LossGridCellSerializer().fields) == loss.CELL_FIELDS  # the cell's one definition (selectors)


class LossGridNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    site = serializers.CharField(allow_blank=True)


class LossGridSerializer(serializers.Serializer):
    benchmark = serializers.CharField()
    cluster = serializers.CharField()
    family = serializers.ChoiceField(choices=loss.FAMILIES)
    window_seconds = serializers.IntegerField()
    generated_at = serializers.DateTimeField()
    nodes = LossGridNodeSerializer(many=True, help_text="the benchmark's nodes")
    cells = LossGridCellSerializer(many=True, help_text=(
        "directed pairs with a summary in the window, in the nodes' creation order (the archive's, not by name)"))


class LossSummaryFilterSet(filters.FilterSet):
    cluster = filters.CharFilter(field_name="source__cluster__name", help_text=CLUSTER_HELP)
    source = filters.CharFilter(field_name="source__name", help_text="the sender's node name")
    destination = filters.CharFilter(field_name="destination__name", help_text="the reflector's node name")
    family = IntegerFilter(field_name="family", help_text="4 or 6")
    since = RFC3339Filter(field_name="period_start", lookup_expr="gte", help_text="periods starting at or after")
    until = RFC3339Filter(field_name="period_start", lookup_expr="lt", help_text="periods starting before")

    class Meta:
        model = LossSummary
        fields = ["cluster", "source", "destination", "family", "since", "until"]


class LossSummaryViewSet(ArchiveViewSet):
    """The agents' loss summaries, newest first: one sender → reflector period each."""

    queryset = LossSummary.objects.select_related("source__cluster", "destination").defer(
        "source__labels", "destination__labels")
    serializer_class = LossSummarySerializer
    filterset_class = LossSummaryFilterSet
    ordering_fields = ["period_start", "lost", "rtt_median_ms"]
    ordering = ["-period_start", "id"]


def _refusal(err: loss_ingest.Refused) -> Response:
    return Response({"detail": err.detail, "errors": err.errors}, status=err.status)


ERRORS_WITH_INDEX = OpenApiResponse(description=(
    "413: more than 1000 summaries; 422: a summary breaks a rule across fields (lost > sent, the peer is the node, "
    "period_end before period_start): errors names each by index and field, nothing stored"))


class LossIngestView(APIView):
    """Loss summaries of one cluster's agents (the contract's lossBatch), idempotent on (source, destination,
    family, period_start)."""

    permission_classes = [WriteAccess]
    parser_classes = [JSONParser]

    @extend_schema(request=None, responses={200: LossIngestOut, 413: ERRORS_WITH_INDEX,
                                            422: ERRORS_WITH_INDEX})  # body: results.api.openapi
    def post(self, request):
        try:
            summaries = loss_ingest.check(request.data)
            # the probe mesh's benchmark and nodes are stored as the measurement ingest stores them: a NUL in a
            # spec or labels (which PostgreSQL's jsonb cannot hold) as U+FFFD, not a 500
            body = {**request.data, **{k: _without_nul(request.data[k]) for k in ("benchmark", "nodes")
                                       if k in request.data}}
            result = loss_ingest.ingest(body, summaries, request.auth)
        except loss_ingest.Refused as err:
            return _refusal(err)
        except scope.OtherCluster as err:
            raise PermissionDenied(str(err)) from None
        return Response({"accepted": result.accepted, "duplicates": result.duplicates}, status=status.HTTP_200_OK)


WINDOW = {"type": "string", "pattern": params.DURATION_PATTERN}


class LossGridView(APIView):
    """The loss grid of a benchmark's nodes over a window: per directed pair loss %, RTT, one-way delay each way
    (only where every period was trusted) and jitter."""

    @extend_schema(
        parameters=[
            OpenApiParameter("benchmark", {"type": "string", "minLength": 1}, required=True,
                             description="namespace/name"),
            OpenApiParameter("cluster", {"type": "string", "minLength": 1}, description="the benchmark's cluster"),
            OpenApiParameter("family", {"type": "integer", "enum": list(loss.FAMILIES)},
                             description="IP version (default 4)"),
            OpenApiParameter("window", WINDOW, description=(
                "how far back from now: 900, 15m, 1h, 7d, aggregated at request; default: each pair's 15 minutes "
                "up to its newest period (kept at ingest), pairs without a period in the last 15 minutes left out")),
        ],
        responses=LossGridSerializer,
    )
    def get(self, request):
        bench = _benchmark(request)
        q = request.query_params
        family = _params(params.choice, "family", q.get("family"), ("4", "6"), "4")
        window = _params(params.duration, "window", q.get("window"), None) if q.get("window") else None
        data = loss.grid(bench, int(family), window)
        # the database wrote the cells' JSON; the envelope is spliced around it without parsing it again
        head = json.dumps({**{k: v for k, v in data.items() if k != "cells_json"},
                           "generated_at": _iso(data["generated_at"])})
        return HttpResponse(head[:-1] + ', "cells": ' + data["cells_json"] + "}", content_type="application/json")


def _iso(t) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


