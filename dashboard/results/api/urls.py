from django.urls import include, path
from rest_framework.routers import DefaultRouter

from results.api import loss, views


class Router(DefaultRouter):
    include_format_suffixes = False  # ?format=csv|json, as the schema says; a suffix would shadow odd ids


router = Router()
router.register("nodes", views.NodeViewSet)
router.register("benchmarks", views.BenchmarkViewSet)
router.register("runs", views.RunViewSet)
router.register("measurements", views.MeasurementViewSet)
router.register("changes", views.ChangeViewSet)
router.register("paths", views.PathViewSet)
router.register("problems", views.ProblemViewSet)
router.register("maintenance", views.MaintenanceViewSet)
router.register("loss", loss.LossSummaryViewSet)

app_name = "api"
urlpatterns = [
    path("ingest/", views.IngestView.as_view(), name="ingest"),
    path("grid/", views.GridView.as_view(), name="grid"),
    path("pairs/history/", views.PairHistoryView.as_view(), name="pair-history"),
    path("compare/rtt/", views.ThroughputVsRttView.as_view(), name="compare-rtt"),
    path("compare/streams/", views.StreamsPairsView.as_view(), name="compare-streams"),
    path("advice/", views.AdviceView.as_view(), name="advice"),
    path("loss/ingest/", loss.LossIngestView.as_view(), name="loss-ingest"),
    path("loss/grid/", loss.LossGridView.as_view(), name="loss-grid"),
    path("", include(router.urls)),
]
