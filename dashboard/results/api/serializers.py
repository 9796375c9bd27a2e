"""Serializers: field-level validation of the ingest contract, and the read representations.

Validation only: writes happen in results.services.
"""

from __future__ import annotations

import logging

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from results import contract, models, rfc3339, selectors, thresholds
from results.diagnosis.limits import LIMITS
from results.protocols import PROTOCOLS
from results.stats.advice import ACTIONS

log = logging.getLogger(__name__)

# ---- ingest (the contract's ingestBatch) ----


@extend_schema_field({"type": "string", "format": "date-time", "pattern": rfc3339.IN_RANGE_PATTERN})
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


class PathIn(serializers.Serializer):
    """The contract's `path`: what the source's tracepath found."""

    hops = serializers.ListField(child=serializers.RegexField(r"^[0-9A-Fa-f.:]+$", max_length=64, allow_null=True),
                                 max_length=64)
    pmtu = serializers.IntegerField(min_value=68, max_value=65535, allow_null=True, required=False)
    interface_mtu = serializers.IntegerField(min_value=68, max_value=16777216, allow_null=True, required=False)
    reached = serializers.BooleanField(required=False, default=False)
    error = serializers.CharField(allow_null=True, allow_blank=True, required=False)


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
    status = serializers.ChoiceField(choices=models.STATUSES)
    error = serializers.CharField(allow_null=True, allow_blank=True, required=False)
    checksum = serializers.ChoiceField(choices=["ok", "mismatch", "skipped"], allow_null=True, required=False)
    destination_kind = serializers.ChoiceField(choices=["store", "sink"], allow_null=True, required=False)
    auth = serializers.ChoiceField(choices=models.AUTH_MODES, allow_null=True, required=False)
    started_at = RFC3339Field()
    finished_at = RFC3339Field()
    files = FileResultIn(many=True, required=False)
    tcp = JSONObjectField(allow_null=True, required=False, help_text="the test's TCP view (the contract's testTcp)")
    implementation = JSONObjectField(required=False, help_text=(
        "the program and versions that made it (the contract's implementation)"))
    host = JSONObjectField(required=False, help_text=(
        "both ends' host telemetry over the test (the contract's host)"))
    congestion_control = serializers.RegexField(r"^[a-z0-9_]{1,15}$", allow_null=True, required=False)
    path = PathIn(required=False, help_text="rtt rows: the source's path to the destination (tracepath)")
    repeat = serializers.IntegerField(min_value=0, max_value=19, allow_null=True, required=False,
                                      help_text="which of the benchmark's repeats of this setting in the run")
    address_family = serializers.ChoiceField(choices=models.ADDRESS_FAMILIES, default="ipv4", required=False,
                                             help_text="the IP version the test ran over (default ipv4)")
    storage = JSONObjectField(required=False, help_text=(
        "disk mode only: where each end kept the files (the contract's storage); absent: memory to memory"))

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
    and efficiency: {warning, critical}, errors keyed efficiency.warning;
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
        known = {k: v for k, v in data.items() if k in thresholds.KEYS}
        if thresholds.EFFICIENCY in data:
            known[thresholds.EFFICIENCY] = thresholds.known_efficiency(data[thresholds.EFFICIENCY])
        return known


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
    cluster = serializers.CharField(max_length=253, allow_null=True, required=False,
                                    help_text="another cluster's node (a cross-cluster pair); default: the batch's")
    site = serializers.CharField(max_length=200, allow_null=True, allow_blank=True, required=False)
    address = serializers.CharField(max_length=253, allow_null=True, allow_blank=True, required=False)
    labels = JSONObjectField(required=False)
    nic_speed_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)
    loopback_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)
    disk_read_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)
    disk_write_gbps = serializers.FloatField(min_value=0, allow_null=True, required=False)
    external = serializers.BooleanField(required=False)


class IngestBatchIn(serializers.Serializer):
    cluster = serializers.CharField(max_length=253, allow_null=True, required=False)
    benchmark = BenchmarkIn()
    run = RunIn()
    nodes = NodeIn(many=True, required=False)
    measurements = MeasurementIn(many=True, max_length=10000, allow_empty=True)


class IngestResultOut(serializers.Serializer):
    created = serializers.IntegerField(help_text="measurements stored by this request")
    duplicates = serializers.IntegerField(help_text="measurements already stored (or repeated in the batch)")
    ids = serializers.ListField(child=serializers.UUIDField(), help_text="ids of the measurements created")


# ---- reads ----


def _cluster_of(source: str) -> serializers.CharField:
    return serializers.CharField(source=source, read_only=True, help_text="the cluster whose operator measured it")


def _node_name() -> serializers.SlugRelatedField:
    return serializers.SlugRelatedField(slug_field="name", read_only=True)


# Comments, not docstrings: drf-spectacular would give every subclass's schema the base's docstring.
class OfCluster(serializers.ModelSerializer):
    # a node or a benchmark, with its cluster
    cluster = _cluster_of("cluster.name")


class OfBenchmark(serializers.ModelSerializer):
    # a record of a benchmark's (a run, a measurement, a change, a problem): the benchmark as namespace/name, and
    # the benchmark's cluster
    cluster = _cluster_of("benchmark.cluster.name")
    benchmark = serializers.StringRelatedField()


class NodeSerializer(OfCluster):
    class Meta:
        model = models.Node
        fields = ["id", "name", "site", "address", "labels", "nic_speed_gbps", "loopback_gbps", "disk_read_gbps",
                  "disk_write_gbps", "external", "first_seen", "last_seen", "cluster"]


class BenchmarkSerializer(OfCluster):
    thresholds_effective = serializers.SerializerMethodField()

    class Meta:
        model = models.Benchmark
        fields = ["id", "namespace", "name", "uid", "spec", "thresholds", "thresholds_effective", "created",
                  "updated", "cluster"]

    def get_thresholds_effective(self, obj) -> dict:
        return obj.effective_thresholds()


class RunSerializer(OfBenchmark):
    class Meta:
        model = models.Run
        fields = ["id", "uid", "name", "benchmark", "scheduled_at", "started_at", "finished_at", "state",
                  "counts", "cluster"]


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


@extend_schema_field(_contract_or_null("implementation"))
class ImplementationField(serializers.JSONField):
    """The program and versions that made a measurement as ingested (the contract's implementation), or null."""


@extend_schema_field(_contract_or_null("host"))
class HostField(serializers.JSONField):
    """Both ends' host telemetry over a test as ingested (the contract's host), or null."""


@extend_schema_field(_contract_or_null("storage"))
class StorageField(serializers.JSONField):
    """Where each end kept a test's files as ingested (the contract's storage), or null: memory to memory."""


_BOUND = {"type": "object", "properties": {
    "limit": {"type": "string", "enum": list(LIMITS)}, "gbps": {"type": "number"},
    "ratio": {"type": "number", "description": "measured ÷ this bound"},
    "basis": {"type": "string", "description": "what the bound is, its formula filled in"},
    "evidence": {"type": "object", "additionalProperties": {"type": ["number", "string"]}},
    "fix": {"type": "string"}, "sits_at": {"type": "boolean"}}}


@extend_schema_field({"anyOf": [{"type": "object", "properties": {
    "limit": {"type": "string", "enum": list(LIMITS)},
    "efficiency": {"type": ["number", "null"]}, "path_gbps": {"type": ["number", "null"]},
    "reason": {"type": "string"}, "fix": {"type": ["string", "null"]},
    "missing": {"type": "array", "items": {"type": "string"}},
    "bounds": {"type": "array", "items": _BOUND}}}, {"type": "null"}]})
class DiagnosisField(serializers.JSONField):
    """The limit model's answer (results/diagnosis/limits.py, Diagnosis.to_dict), or null: not diagnosed."""


class FileTransferSerializer(serializers.ModelSerializer):
    tcp = FileTcpField(read_only=True)

    class Meta:
        model = models.FileTransfer
        fields = ["name", "size", "bytes", "started_at", "finished_at", "seconds", "error", "checksum_ok", "tcp"]


class MeasurementSerializer(OfBenchmark):
    source = _node_name()
    destination = _node_name()
    run = serializers.SlugRelatedField(slug_field="uid", read_only=True)
    implementation = ImplementationField(read_only=True)
    storage = StorageField(read_only=True)

    class Meta:
        model = models.Measurement
        fields = ["id", "benchmark", "run", "source", "destination", "protocol", "streams", "concurrency",
                  "file_size", "file_count", "total_bytes", "throughput_gbps", "aggregate_gbps", "peak_gbps",
                  "rtt_ms", "rtt_min_ms", "rtt_max_ms", "retransmits", "congestion_control", "address_family",
                  "storage", "storage_setting", "repeat", "status", "error", "checksum", "destination_kind", "auth",
                  "implementation",
                  "started_at", "finished_at", "ingested_at", "cluster", "binding_limit", "efficiency"]


class MeasurementDetailSerializer(MeasurementSerializer):
    files = FileTransferSerializer(many=True, read_only=True)
    tcp = TestTcpField(read_only=True)
    host = HostField(read_only=True)
    diagnosis = DiagnosisField(read_only=True)

    class Meta(MeasurementSerializer.Meta):
        fields = [*MeasurementSerializer.Meta.fields, "tcp", "host", "diagnosis", "files"]


class GridCellSerializer(serializers.Serializer):
    source = serializers.CharField()
    destination = serializers.CharField()
    streams = serializers.IntegerField()
    address_family = serializers.ChoiceField(choices=models.ADDRESS_FAMILIES)
    congestion_control = serializers.CharField(allow_blank=True, help_text="empty: the nodes' default")
    auth = serializers.ChoiceField(choices=[*models.AUTH_MODES, ""], allow_blank=True, help_text=(
        "how the copies were authorized (token, x509, none); empty: a protocol without auth modes"))
    storage = serializers.ChoiceField(choices=models.STORAGE_SETTINGS, help_text=(
        "where the ends kept the files: memory (memory to memory), disk (disk to disk), disk-to-memory or "
        "memory-to-disk (source first)"))
    value = serializers.FloatField(allow_null=True)
    finished_at = serializers.DateTimeField()
    age_seconds = serializers.FloatField()
    stale = serializers.BooleanField()
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    count = serializers.IntegerField(help_text="measurements the value summarises: a window's, or in the latest "
                                                "mode the newest run's repeats of the setting (spec.repeats)")
    low = serializers.FloatField(allow_null=True, help_text="latest mode, 3+ repeats: the median's 95 % interval")
    high = serializers.FloatField(allow_null=True)
    state = serializers.ChoiceField(choices=thresholds.STATES, help_text=(
        "by the benchmark's thresholds, or maintenance (a window on its node or pair)"))
    concurrency = serializers.IntegerField(allow_null=True, required=False, help_text=(
        "streams=newest only: the files at once the cell's measurement ran (its setting is streams × "
        "concurrency); null in mode mean or median, or when not recorded"))
    binding_limit = serializers.ChoiceField(choices=[*LIMITS, ""], allow_blank=True, help_text=(
        "the limit the cell's newest measurement ran into (the limit model, README \"Why a cell is slow\"); empty: "
        "not diagnosed (an RTT cell, a failed test, not analysed yet)"))
    efficiency = serializers.FloatField(allow_null=True, help_text=(
        "the newest measurement ÷ the pair's path capacity (its iperf3 with the most streams); null: no path figure"))
    evidence = serializers.CharField(allow_null=True, help_text="the limit model's reason, with its figures")
    fix = serializers.CharField(allow_null=True, help_text="what to change, citing the figures; null: none")


class GridNodeSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="cluster:node in a grid of several clusters")
    cluster = serializers.CharField()
    site = serializers.CharField()
    loopback_gbps = serializers.FloatField(allow_null=True)
    disk_read_gbps = serializers.FloatField(allow_null=True, help_text=(
        "its disk path's sequential read ceiling (fio, O_DIRECT), drawn on the diagonal of a disk grid"))
    disk_write_gbps = serializers.FloatField(allow_null=True, help_text="its disk path's write ceiling (fio)")


class GridSerializer(serializers.Serializer):
    benchmark = serializers.CharField()
    clusters = serializers.ListField(child=serializers.CharField(), help_text=(
        "the clusters whose benchmark the grid shows (several: combined, nodes named cluster:node, thresholds "
        "those of the first cluster's benchmark)"))
    protocol = serializers.CharField()
    kind = serializers.ChoiceField(choices=["throughput", "latency"])
    metric = serializers.CharField()
    unit = serializers.CharField()
    mode = serializers.CharField()
    window_seconds = serializers.IntegerField()
    thresholds = serializers.DictField(child=serializers.FloatField())
    efficiency_thresholds = serializers.DictField(child=serializers.FloatField(), help_text=(
        "the bounds on a cell's efficiency (warning, critical: the benchmark's spec.thresholds.efficiency over the "
        "defaults 0.8 and 0.5), for colouring the cells by efficiency"))
    generated_at = serializers.DateTimeField()
    nodes = GridNodeSerializer(many=True)
    cells = GridCellSerializer(many=True)


class HistoryDaySerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="measurements of the day")
    failures = serializers.IntegerField(help_text="of them, those that did not succeed")
    p10 = serializers.FloatField(allow_null=True)
    p90 = serializers.FloatField(allow_null=True)


class HistoryPointSerializer(serializers.Serializer):
    id = serializers.UUIDField(allow_null=True, help_text="null: a day's rollup (see day)")
    source = serializers.CharField()
    destination = serializers.CharField()
    protocol = serializers.CharField()
    streams = serializers.IntegerField(allow_null=True)
    throughput_gbps = serializers.FloatField(allow_null=True)
    aggregate_gbps = serializers.FloatField(allow_null=True)
    rtt_ms = serializers.FloatField(allow_null=True)
    congestion_control = serializers.CharField(allow_null=True, help_text="null: the nodes' default")
    address_family = serializers.ChoiceField(choices=models.ADDRESS_FAMILIES)
    auth = serializers.ChoiceField(choices=models.AUTH_MODES, allow_null=True,
                                   help_text="token, x509 or none; null: a protocol without auth modes")
    storage = serializers.ChoiceField(choices=models.STORAGE_SETTINGS, help_text=(
        "where the ends kept the files: memory, disk, disk-to-memory or memory-to-disk (source first)"))
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    finished_at = serializers.DateTimeField()
    day = HistoryDaySerializer(allow_null=True, help_text=(
        "null: a measurement. Older than the raw retention (README \"Retention\"): a cell's day from the daily "
        "rollups, its value the day's median and finished_at its newest measurement's"))


# A chart point's cell settings beside its streams (results.selectors.Pick), after the subclass's own fields (a
# comment, not a docstring: the subclasses would take it as their schema's description)
class CellSettingsSerializer(serializers.Serializer):
    address_family = serializers.CharField()
    congestion_control = serializers.CharField(help_text='"" = the nodes\' default')
    auth = serializers.CharField(help_text='token, x509 or none; "" for a protocol without modes')
    storage = serializers.ChoiceField(choices=models.STORAGE_SETTINGS, help_text="memory, disk, disk-to-memory or "
                                                                                  "memory-to-disk (disk mode)")

    def get_fields(self):
        fields = super().get_fields()  # DRF puts a base class's fields first
        settings = {name: fields.pop(name) for name in CellSettingsSerializer._declared_fields}
        return {**fields, **settings}


# A comparison chart's point: the pair's ends by name, then the subclass's own fields, then the cell's settings
class PairPointSerializer(CellSettingsSerializer):
    source = serializers.CharField()
    destination = serializers.CharField()


class RttPointSerializer(PairPointSerializer):
    streams = serializers.IntegerField()
    rtt_ms = serializers.FloatField()
    throughput_gbps = serializers.FloatField()


class StreamsPairSerializer(PairPointSerializer):
    protocol = serializers.CharField()
    low_streams = serializers.IntegerField()
    high_streams = serializers.IntegerField()
    low_gbps = serializers.FloatField()
    high_gbps = serializers.FloatField()


# ---- watching over time: changes, problems, maintenance ----


class StrictFields:
    """A write serializer that refuses fields it does not take (a misspelt or read-only one is a 400 naming it,
    not silently dropped)."""

    def validate_fields_known(self) -> None:
        given = set(getattr(self, "initial_data", None) or ())
        writable = {name for name, f in self.fields.items() if not f.read_only}
        unknown = sorted(given - writable)
        if unknown:
            raise serializers.ValidationError({unknown[0]: f"unknown or read-only field; this request takes "
                                                           f"{', '.join(sorted(writable))}"})

    def to_internal_value(self, data):
        self.validate_fields_known()
        return super().to_internal_value(data)


class Text(serializers.CharField):
    """Free text from a person: a NUL character (which PostgreSQL cannot store) is kept as U+FFFD, as ingest does."""

    def to_internal_value(self, data):
        return super().to_internal_value(data.replace("\x00", "\ufffd") if isinstance(data, str) else data)


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 500,
                      "pattern": contract.schema()["$defs"]["name"]["pattern"]})
class NonBlankText(Text):
    """Text that is not only whitespace (the contract's rule for names, so the schema says what is trimmed)."""


class ChangeSerializer(OfBenchmark):
    source = _node_name()
    destination = _node_name()
    ratio = serializers.FloatField(read_only=True, help_text="after / before")

    class Meta:
        model = models.Change
        fields = ["id", "benchmark", "source", "destination", "protocol", "streams", "address_family",
                  "congestion_control", "auth", "storage_setting", "metric", "measurement", "at", "before", "after",
                  "ratio", "worse",
                  "detected_at", "runs_to_detect", "cluster"]


class PathSerializer(serializers.ModelSerializer):
    benchmark = serializers.StringRelatedField()
    source = _node_name()
    destination = _node_name()
    run = serializers.SlugRelatedField(source="measurement.run", slug_field="uid", read_only=True,
                                       help_text="the run's uid")
    hops = serializers.ListField(child=serializers.CharField(allow_null=True), read_only=True,
                                 help_text="hop addresses in order; null: a hop that did not answer")

    class Meta:
        model = models.Path
        fields = ["id", "benchmark", "source", "destination", "run", "measurement", "at", "hops", "hop_count",
                  "reached", "pmtu", "interface_mtu", "pmtu_reduced", "changed", "error"]


class ProblemSerializer(OfBenchmark):
    acknowledged = serializers.BooleanField(read_only=True,
                                            help_text="acknowledged for its current cells and severity")
    cells = serializers.ListField(child=serializers.ListField(), help_text=(
        '[source, destination, protocol, streams], plus the setting ("ipv6 bbr", "token") when not IPv4 and the '
        'default, or with an auth mode'))

    class Meta:
        model = models.Problem
        fields = ["id", "benchmark", "key", "kind", "severity", "summary", "cells", "first_seen",
                  "last_seen", "resolved_at", "acknowledged", "ack_by", "ack_at", "ack_note", "cluster"]


class AcknowledgeIn(StrictFields, serializers.Serializer):
    note = Text(max_length=1000, allow_blank=True, required=False, default="")


class NodeRefField(serializers.SlugRelatedField):
    """A node by name, "cluster:node" when several clusters have that name (selectors.get_node)."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", queryset=models.Node.objects.select_related("cluster"), required=False,
                         allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not data:
            self.fail("invalid")
        try:
            return selectors.get_node(data)
        except models.Node.DoesNotExist:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        except models.Node.MultipleObjectsReturned:
            raise serializers.ValidationError(f"node {data!r} is in several clusters: name it cluster:node") from None


class MaintenanceSerializer(StrictFields, serializers.ModelSerializer):
    node = NodeRefField(help_text="a node in maintenance (or give source and destination for a pair); "
                                  "cluster:node when several clusters have that name")
    source = NodeRefField()
    destination = NodeRefField()
    reason = NonBlankText(min_length=1, max_length=500)
    starts_at = RFC3339Field(required=False, help_text="default: now")
    ends_at = RFC3339Field()
    active = serializers.SerializerMethodField()

    class Meta:
        model = models.Maintenance
        fields = ["id", "node", "source", "destination", "reason", "starts_at", "ends_at", "active", "created_by",
                  "created"]
        read_only_fields = ["created_by", "created"]

    def get_active(self, obj) -> bool:
        from django.utils import timezone

        return obj.starts_at <= timezone.now() < obj.ends_at

    def validate(self, attrs):
        from django.utils import timezone

        node, source, destination = attrs.get("node"), attrs.get("source"), attrs.get("destination")
        if node is not None and (source is not None or destination is not None):
            raise serializers.ValidationError({"node": "give a node, or a source and a destination, not both."})
        if node is None and (source is None or destination is None):
            raise serializers.ValidationError(
                {"node": "give a node, or both source and destination (a pair, both directions)."})
        if source is not None and source == destination:
            raise serializers.ValidationError({"destination": "destination equals source."})
        attrs.setdefault("starts_at", timezone.now())
        if attrs["ends_at"] <= attrs["starts_at"]:
            raise serializers.ValidationError({"ends_at": "ends_at must be after starts_at (and after now when "
                                                          "starts_at is not given)."})
        return attrs
# ---- advice per link (results.stats.advice) ----


class SettingOut(serializers.Serializer):
    streams = serializers.IntegerField(min_value=1)
    concurrency = serializers.IntegerField(min_value=1, help_text="files at once")


class SettingLevelOut(SettingOut):
    runs = serializers.IntegerField(help_text="runs counted (the newest 20 at most; a failed one as 0 Gbit/s)")
    median_gbps = serializers.FloatField()
    low_gbps = serializers.FloatField(allow_null=True, help_text="95 % bootstrap interval of the median; null "
                                                                 "below 3 runs")
    high_gbps = serializers.FloatField(allow_null=True)
    best = serializers.BooleanField()
    knee = serializers.BooleanField()


class NextSettingOut(SettingOut):
    action = serializers.ChoiceField(choices=ACTIONS, help_text="why this setting: the rule's step (see reason)")
    reason = serializers.CharField()
    current = SettingOut(help_text="where the climb stands: what is exploited once settled")


class AdviceBoundsOut(serializers.Serializer):
    streams_max = serializers.IntegerField()
    concurrency_max = serializers.IntegerField()
    concurrency_step = serializers.IntegerField()
    connections_max = serializers.IntegerField()


class AdviceOut(serializers.Serializer):
    source = serializers.CharField()
    destination = serializers.CharField()
    protocol = serializers.CharField()
    benchmark = serializers.CharField(allow_null=True, help_text="namespace/name, or null for every benchmark")
    runs = serializers.IntegerField(help_text="runs of the link in the window (failed ones count as 0 Gbit/s)")
    margin = serializers.FloatField(help_text="the knee is the cheapest setting within this fraction of the best")
    settings = SettingLevelOut(many=True, help_text="every setting run, cheapest (fewest streams × files) first")
    best = SettingOut(allow_null=True, help_text="highest median among settings with 3+ runs")
    knee = SettingOut(allow_null=True, help_text="cheapest setting within margin of the best")
    reason = serializers.CharField()
    bounds = AdviceBoundsOut()
    next = NextSettingOut(help_text="the next run's setting within bounds (optimize: true)")


class EvaluateIn(serializers.Serializer):
    """POST /api/v1/problems/evaluate/: which benchmark (cluster: the token's, else the default one)."""

    namespace = serializers.CharField(min_length=1, max_length=253)
    name = serializers.CharField(min_length=1, max_length=253)
    cluster = serializers.CharField(max_length=253, required=False, allow_blank=True)


class EvaluateOut(serializers.Serializer):
    benchmark = serializers.CharField(help_text="namespace/name")
    cluster = serializers.CharField()
    problems = serializers.SerializerMethodField(help_text="its open problems, now")

    @extend_schema_field(ProblemSerializer(many=True))
    def get_problems(self, out: dict) -> list:
        return ProblemSerializer(out["problems"], many=True).data
