from django.apps import AppConfig


class ResultsConfig(AppConfig):
    name = "results"
    verbose_name = "tpcmesh results"
    default_auto_field = "django.db.models.BigAutoField"
