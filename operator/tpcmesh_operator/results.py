"""Delivery of measurements to the dashboard's ingest API (`POST /api/v1/ingest/`, contract `ingestBatch`).

The run status is the outbox: a measurement stays there until a batch holding it is acknowledged (2xx). The
dashboard is idempotent by measurement id, so a batch re-sent after a lost answer is harmless. `deliver()` retries
with exponential backoff (tenacity); a 4xx other than 401/403/429 is a rejected batch (our bug, not an outage).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest/"
MAX_BATCH = 500


class DeliveryFailed(Exception):
    """Temporary: the dashboard could not be reached or answered 5xx/401/403/429. Try later."""


class BatchRejected(Exception):
    """Permanent: the dashboard refused the batch as invalid (HTTP 400/422...)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"dashboard rejected the batch: HTTP {status}: {body}")
        self.status = status
        self.body = body


class ResultsClient:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0, verify: Any = True) -> None:
        self.url = url.rstrip("/") + INGEST_PATH
        headers = {"User-Agent": "tpcmesh-operator"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0), headers=headers, verify=verify)

    async def __aenter__(self) -> ResultsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def post_batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """One attempt. Returns the dashboard's answer {created, duplicates, ids}."""
        try:
            r = await self._client.post(self.url, json=dict(batch))
        except httpx.HTTPError as e:
            raise DeliveryFailed(f"POST {self.url} failed: {type(e).__name__}: {e}") from e
        try:
            body = r.json()
        except ValueError:
            body = r.text[:500]
        if r.status_code >= 500 or r.status_code in (401, 403, 408, 429):
            raise DeliveryFailed(f"POST {self.url}: HTTP {r.status_code}: {body}")
        if r.status_code >= 400:
            raise BatchRejected(r.status_code, body)
        return body if isinstance(body, dict) else {}


def batches(measurements: Sequence[Mapping[str, Any]], size: int = MAX_BATCH) -> list[list[Mapping[str, Any]]]:
    return [list(measurements[i:i + size]) for i in range(0, len(measurements), size)]


async def deliver_with_backoff(
    client: ResultsClient,
    batch: Mapping[str, Any],
    max_seconds: float,
    initial: float = 0.5,
    maximum: float = 30.0,
) -> dict[str, Any]:
    """Post one batch, retrying temporary failures with exponential backoff for up to max_seconds."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(DeliveryFailed),
        wait=wait_exponential(multiplier=initial, max=maximum),
        stop=stop_after_delay(max_seconds),
        reraise=True,
    ):
        with attempt:
            return await client.post_batch(batch)
    raise DeliveryFailed("unreachable")  # pragma: no cover
