"""Request body limit (413) and request metrics."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import JsonResponse

from results import metrics


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.MAX_BODY_BYTES:
            metrics.INGEST_REJECTED.labels(reason="too_large").inc()
            return JsonResponse(
                {"detail": f"Request body of {length} bytes exceeds the limit of {settings.MAX_BODY_BYTES} bytes; "
                           "send the measurements in smaller batches."},
                status=413,
            )
        return self.get_response(request)


class MetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        metrics.LATENCY.labels(route=route).observe(time.perf_counter() - start)
        metrics.REQUESTS.labels(method=request.method, route=route, code=str(response.status_code)).inc()
        return response
