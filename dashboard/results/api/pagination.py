from rest_framework import pagination


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
