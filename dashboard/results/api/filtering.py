"""The list endpoints' filter backend: django-filter's, refusing a parameter given more than once unless it takes
several values (`?status=failed&status=cancelled`). Django's QueryDict answers the last of repeated values, so
`?min_throughput_gbps=abc&min_throughput_gbps=` would otherwise be read as no filter at all and answered 200."""

from __future__ import annotations

from django_filters import MultipleChoiceFilter
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError


class SingleValueFilterBackend(DjangoFilterBackend):
    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None:
            multi = {name for name, f in filterset_class.base_filters.items() if isinstance(f, MultipleChoiceFilter)}
            repeated = {k: len(v) for k, v in request.query_params.lists() if len(v) > 1 and k not in multi}
            if repeated:
                raise ValidationError({k: f"given {n} times: give it once" for k, n in sorted(repeated.items())})
        return super().filter_queryset(request, queryset, view)
