"""`?ordering=` checked: DRF's OrderingFilter drops terms it does not know and orders by the default, so a typo
read as a sorted answer. Here a term outside the view's ordering_fields is a 400, and the schema's pattern for the
parameter is built from the same fields."""

from __future__ import annotations

import re

from rest_framework import filters
from rest_framework.exceptions import ValidationError


def pattern(fields: list[str]) -> str:
    """Comma-separated terms, each a field or -field (descending)."""
    term = "-?(?:" + "|".join(re.escape(f) for f in fields) + ")"
    return f"^{term}(?:,{term})*$"


class OrderingFilter(filters.OrderingFilter):
    def get_ordering(self, request, queryset, view):
        value = request.query_params.get(self.ordering_param)
        if not value:
            return self.get_default_ordering(view)
        fields = list(getattr(view, "ordering_fields", None) or [])
        if not re.search(pattern(fields), value):
            raise ValidationError({self.ordering_param: f"{value!r} is not a comma-separated list of "
                                   f"{', '.join(fields)} (each may start with - for descending)"})
        return value.strip().split(",")

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        fields = list(getattr(view, "ordering_fields", None) or [])
        for parameter in parameters:
            parameter["schema"]["pattern"] = pattern(fields)
            parameter["description"] = f"comma-separated, each of {', '.join(fields)}; -field for descending"
        return parameters
