from django.contrib import admin, messages

from results.models import ApiToken, Benchmark, Cluster, Measurement, Node, Run


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "write", "cluster", "enabled", "created", "last_used"]
    list_filter = ["write", "enabled", "cluster"]
    readonly_fields = ["prefix", "created", "last_used"]
    fields = ["name", "write", "cluster", "enabled", "prefix", "created", "last_used"]

    def save_model(self, request, obj, form, change):
        if not change:
            key = ApiToken.generate_key()
            obj.set_key(key)
            messages.warning(request, f"API token {obj.name}: {key} (shown once; only its hash is stored)")
        super().save_model(request, obj, form, change)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "created"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "site", "address", "nic_speed_gbps", "loopback_gbps", "last_seen"]
    list_filter = ["cluster"]
    search_fields = ["name", "site", "address"]


@admin.register(Benchmark)
class BenchmarkAdmin(admin.ModelAdmin):
    list_display = ["namespace", "name", "cluster", "uid", "updated"]
    list_filter = ["cluster"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["name", "benchmark", "state", "started_at", "finished_at"]
    list_filter = ["state"]


@admin.register(Measurement)
class MeasurementAdmin(admin.ModelAdmin):
    list_display = ["id", "source", "destination", "protocol", "streams", "throughput_gbps", "status", "finished_at"]
    list_filter = ["protocol", "status"]
    raw_id_fields = ["run", "benchmark", "source", "destination"]
    show_full_result_count = False
