"""Serializers: field-level validation of the ingest contract, and the read representations.

Validation only: writes happen in results.services.
"""

from __future__ import annotations

import logging

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from results import contract, rfc3339, thresholds
from results.models import PROTOCOLS, STATUSES, Benchmark, FileTransfer, Measurement, Node, Run

log = logging.getLogger(__name__)

# ---- ingest (the contract's ingestBatch) ----


class RFC3339Field(serializers.DateTimeField):
    """A date-time with a UTC offset (RFC 3339, as the contract says), parsed by results.rfc3339: several times
    cheaper than DRF's generic parsing, which matters at 10 000 measurements a batch."""

    def to_internal_value(self, value):
        if isinstance(value, str):
            try:
                return rfc3339.parse(value)
            except ValueError as err:
                raise serializers.ValidationError(str(err)) from None
        return super().to_internal_value(value)


def _without_nul(value):
    """A JSON value with every NUL character (in keys and text) as U+FFFD: PostgreSQL's jsonb cannot store NUL,
    and a stray one in a benchmark's spec or a node's labels must not cost the batch its measurements."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


class JSONObjectField(serializers.DictField):
    """A free-form JSON object (a spec, labels, counts), stored as given but for NUL characters."""

    def to_internal_value(self, data):
        return _without_nul(super().to_internal_value(data))


class FileResultIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9._-]+$", max_length=200)
    size = serializers.IntegerField(min_value=0)
    bytes = serializers.IntegerField(min_value=0)
    started_at = RFC3339Field()
    finished_at = RFC3339Field()
    seconds = serializers.FloatField(min_value=0, allow_null=True, required=False)
    error = serializers.CharField(allow_null=True, allow_blank=True)
    checksum_ok = serializers.BooleanField(allow_null=True, required=False)
    tcp = JSONObjectField(allow_null=True, required=False, help_text="the file's TCP view (the contract's fileTcp)")

    def validate(self, attrs):
        if attrs["finished_at"] < attrs["started_at"]:
            raise serializers.ValidationError({"finished_at": "finished_at is before started_at."})
        return attrs


def _gbps():
    return serializers.FloatField(min_value=0, allow_null=True, required=False)


class MeasurementIn(serializers.Serializer):
    id = serializers.UUIDField()
    source = serializers.CharField(min_length=1, max_length=253)
    destination = serializers.CharField(min_length=1, max_length=253)
    protocol = serializers.ChoiceField(choices=PROTOCOLS)
    streams = serializers.IntegerField(min_value=1, max_value=100, allow_null=True, required=False)
    concurrency = serializers.IntegerField(min_value=1, max_value=1000, allow_null=True, required=False)
    file_size = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    file_count = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    total_bytes = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    throughput_gbps = _gbps()
    aggregate_gbps = _gbps()
    peak_gbps = _gbps()
    rtt_ms = serializers.FloatField(min_value=0, allow_null=True, required=False)
    rtt_min_ms = serializers.FloatField(min_value=0, allow_null=True, required=False)
    rtt_max_ms = serializers.FloatField(min_value=0, allow_null=True, required=False)
    status = serializers.ChoiceField(choices=STATUSES)
    error = serializers.CharField(allow_null=True, allow_blank=True, required=False)
    checksum = serializers.ChoiceField(choices=["ok", "mismatch", "skipped"], allow_null=True, required=False)
    destination_kind = serializers.ChoiceField(choices=["store", "sink"], allow_null=True, required=False)
    started_at = RFC3339Field()
    finished_at = RFC3339Field()
    files = FileResultIn(many=True, required=False)
    tcp = JSONObjectField(allow_null=True, required=False, help_text="the test's TCP view (the contract's testTcp)")
    congestion_control = serializers.RegexField(r"^[a-z0-9_]{1,15}$", allow_null=True, required=False)

    def validate(self, attrs):
        errors = {}
        if attrs["destination"] == attrs["source"]:
            errors["destination"] = "destination equals source; a measurement is between two different nodes."
        if attrs["finished_at"] < attrs["started_at"]:
            errors["finished_at"] = "finished_at is before started_at."
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class ThresholdsField(serializers.DictField):
    """The TransferBenchmark's spec.thresholds: goodGbps, warnGbps, goodRttMs, warnRttMs (numbers, each optional;
    other keys are ignored and logged); errors are keyed by the threshold, so they read
    benchmark.thresholds.goodGbps."""

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        problems = thresholds.errors(data)
        if problems:
            raise serializers.ValidationError(problems)
        ignored = thresholds.unknown(data)
        if ignored:  # additive: a newer operator's key must not hold back the measurements of the batch
            log.warning("Ignored unknown benchmark thresholds %s (known: %s)", ", ".join(ignored),
                        ", ".join(thresholds.KEYS))
        return {k: v for k, v in data.items() if k in thresholds.KEYS}


class BenchmarkIn(serializers.Serializer):
    namespace = serializers.CharField(max_length=253)
    name = serializers.CharField(max_length=253)
    uid = serializers.CharField(max_length=64, allow_null=True, required=False)
    spec = JSONObjectField(required=False)
    thresholds = ThresholdsField(required=False)


class RunIn(serializers.Serializer):
    uid = serializers.CharField(max_length=64)
    name = serializers.CharField(max_length=253)
    scheduled_at = RFC3339Field(allow_null=True, required=False)
    started_at = RFC3339Field(allow_null=True, required=False)
    finished_at = RFC3339Field(allow_null=True, required=False)
    state = serializers.CharField(max_length=40, required=False, allow_blank=True)
    counts = JSONObjectField(required=False)


class NodeIn(serializers.Serializer):
    name = serializers.CharField(max_length=253)
    site = serializers.CharField(max_length=200, allow_null=True, allow_blank=True, required=False)
    address = serializers.CharField(max_length=253, allow_null=True, allow_blank=True, required=False)
    labels = JSONObjectField(required=False)
    nic_speed_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)
    loopback_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)


class IngestBatchIn(serializers.Serializer):
    benchmark = BenchmarkIn()
    run = RunIn()
    nodes = NodeIn(many=True, required=False)
    measurements = MeasurementIn(many=True, max_length=10000, allow_empty=True)


class IngestResultOut(serializers.Serializer):
    created = serializers.IntegerField(help_text="measurements stored by this request")
    duplicates = serializers.IntegerField(help_text="measurements already stored (or repeated in the batch)")
    ids = serializers.ListField(child=serializers.UUIDField(), help_text="ids of the measurements created")


# ---- reads ----


class NodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = ["id", "name", "site", "address", "labels", "nic_speed_gbps", "loopback_gbps", "first_seen",
                  "last_seen"]


class BenchmarkSerializer(serializers.ModelSerializer):
    thresholds_effective = serializers.SerializerMethodField()

    class Meta:
        model = Benchmark
        fields = ["id", "namespace", "name", "uid", "spec", "thresholds", "thresholds_effective", "created", "updated"]

    def get_thresholds_effective(self, obj) -> dict:
        return obj.effective_thresholds()


class RunSerializer(serializers.ModelSerializer):
    benchmark = serializers.StringRelatedField()

    class Meta:
        model = Run
        fields = ["id", "uid", "name", "benchmark", "scheduled_at", "started_at", "finished_at", "state", "counts"]


def _contract_or_null(definition: str) -> dict:
    """The contract's definition (inlined) or null, for a read field that serves it as stored."""
    root = contract.schema()
    return {"anyOf": [contract._inline(root["$defs"][definition], root["$defs"]), {"type": "null"}]}


@extend_schema_field(_contract_or_null("fileTcp"))
class FileTcpField(serializers.JSONField):
    """A file's TCP view as ingested (the contract's fileTcp), or null."""


@extend_schema_field(_contract_or_null("testTcp"))
class TestTcpField(serializers.JSONField):
    """A test's TCP view as ingested (the contract's testTcp), or null."""


class FileTransferSerializer(serializers.ModelSerializer):
    tcp = FileTcpField(read_only=True)

    class Meta:
        model = FileTransfer
        fields = ["name", "size", "bytes", "started_at", "finished_at", "seconds", "error", "checksum_ok", "tcp"]


class MeasurementSerializer(serializers.ModelSerializer):
    source = serializers.SlugRelatedField(slug_field="name", read_only=True)
    destination = serializers.SlugRelatedField(slug_field="name", read_only=True)
    run = serializers.SlugRelatedField(slug_field="uid", read_only=True)
    benchmark = serializers.StringRelatedField()

    class Meta:
        model = Measurement
        fields = ["id", "benchmark", "run", "source", "destination", "protocol", "streams", "concurrency",
                  "file_size", "file_count", "total_bytes", "throughput_gbps", "aggregate_gbps", "peak_gbps",
                  "rtt_ms", "rtt_min_ms", "rtt_max_ms", "retransmits", "congestion_control", "status", "error",
                  "checksum",
                  "destination_kind", "started_at", "finished_at", "ingested_at"]


class MeasurementDetailSerializer(MeasurementSerializer):
    files = FileTransferSerializer(many=True, read_only=True)
    tcp = TestTcpField(read_only=True)

    class Meta(MeasurementSerializer.Meta):
        fields = [*MeasurementSerializer.Meta.fields, "tcp", "files"]


class GridCellSerializer(serializers.Serializer):
    source = serializers.CharField()
    destination = serializers.CharField()
    streams = serializers.IntegerField()
    value = serializers.FloatField(allow_null=True)
    finished_at = serializers.DateTimeField()
    age_seconds = serializers.FloatField()
    stale = serializers.BooleanField()
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    count = serializers.IntegerField()
    state = serializers.ChoiceField(choices=thresholds.STATES, help_text="by the benchmark's thresholds")


class GridNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    site = serializers.CharField()
    loopback_gbps = serializers.FloatField(allow_null=True)


class GridSerializer(serializers.Serializer):
    benchmark = serializers.CharField()
    protocol = serializers.CharField()
    kind = serializers.ChoiceField(choices=["throughput", "latency"])
    metric = serializers.CharField()
    unit = serializers.CharField()
    mode = serializers.CharField()
    window_seconds = serializers.IntegerField()
    thresholds = serializers.DictField(child=serializers.FloatField())
    generated_at = serializers.DateTimeField()
    nodes = GridNodeSerializer(many=True)
    cells = GridCellSerializer(many=True)


class HistoryPointSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    source = serializers.CharField()
    destination = serializers.CharField()
    protocol = serializers.CharField()
    streams = serializers.IntegerField(allow_null=True)
    throughput_gbps = serializers.FloatField(allow_null=True)
    aggregate_gbps = serializers.FloatField(allow_null=True)
    rtt_ms = serializers.FloatField(allow_null=True)
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    finished_at = serializers.DateTimeField()


class RttPointSerializer(serializers.Serializer):
    source = serializers.CharField()
    destination = serializers.CharField()
    streams = serializers.IntegerField()
    rtt_ms = serializers.FloatField()
    throughput_gbps = serializers.FloatField()


class StreamsPairSerializer(serializers.Serializer):
    protocol = serializers.CharField()
    source = serializers.CharField()
    destination = serializers.CharField()
    low_streams = serializers.IntegerField()
    high_streams = serializers.IntegerField()
    low_gbps = serializers.FloatField()
    high_gbps = serializers.FloatField()
