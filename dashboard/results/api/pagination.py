"""Offset paging whose `limit` and `offset` are checked: DRF's own silently ignores `limit=abc` or `offset=-3`,
so a client's mistake would read as a complete first page."""

from rest_framework import pagination
from rest_framework.exceptions import ValidationError

from results import params

LARGEST = 2**62  # beyond any table; a bound keeps a huge number a clear 400


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def get_limit(self, request):
        value = request.query_params.get(self.limit_query_param)
        limit = _checked(params.integer, self.limit_query_param, value, self.default_limit, 1, LARGEST)
        return min(limit, self.max_limit)

    def get_offset(self, request):
        return _checked(params.integer, self.offset_query_param, request.query_params.get(self.offset_query_param),
                        0, 0, LARGEST)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: {"minimum": 1, "maximum": LARGEST},
                  self.offset_query_param: {"minimum": 0, "maximum": LARGEST}}
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"rows per page (default {self.default_limit}; at most {self.max_limit})"
        return parameters


def _checked(fn, *args):
    try:
        return fn(*args)
    except params.ParamError as err:
        raise ValidationError({err.param: err.message}) from None
