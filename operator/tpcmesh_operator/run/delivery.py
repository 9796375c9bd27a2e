"""Delivery of measurements to the dashboard's ingest API (`POST /api/v1/ingest/`, contract `ingestBatch`).

The run status is the outbox: a measurement stays there until a batch holding it is acknowledged (2xx with an
answer that accounts for every measurement). The dashboard is idempotent by measurement id, so a batch re-sent
after a lost answer is harmless. Nothing is dropped because of a status code:

- 400/422 (`BatchRejected`): the dashboard refused the content. `post_bisecting` splits the batch until each refused
  measurement stands alone, so only those are set aside (the caller keeps them, with the dashboard's reason); a
  refusal that names no measurement (the envelope, or an answer that is not the dashboard's) stays temporary.
- 413 (`BatchTooLarge`): temporary; the caller posts smaller batches.
- anything else (no answer, 3xx, 401/403/404/408/409/429, 5xx, an unexpected 2xx body): `DeliveryFailed`, temporary.

The results token is re-read (`token_source`) after a 401 and before the next attempt after any failure, so a
rotated Secret is picked up without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from ..plan.optimizer import AdviceNotFound, AdviceUnavailable
from .httpclient import OwnsHttpClient

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest/"
LOSS_INGEST_PATH = "/api/v1/loss/ingest/"  # the loss probes' summaries (run/lossprobe.py)
MAX_BATCH = 500
LOSS_MAX_BATCH = 1000
REFUSED = (400, 422)


class ProblemsUnavailable(Exception):
    """The dashboard did not say which problems are open (the message says why)."""


class DeliveryFailed(Exception):
    """Temporary: the dashboard could not be reached or did not acknowledge the batch. Try later."""


class BatchTooLarge(DeliveryFailed):
    """HTTP 413 (an ingress or the dashboard limits the body): try smaller batches."""


class BatchRejected(Exception):
    """The dashboard refused the batch's content (HTTP 400/422), with its list of {field, message}."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        errors = body.get("errors") if isinstance(body, Mapping) else None
        self.errors: list[Mapping[str, Any]] = [e for e in errors or [] if isinstance(e, Mapping)]
        super().__init__(f"dashboard refused the batch: HTTP {status}: {self.reason}")

    @property
    def reason(self) -> str:
        if self.errors:
            return "; ".join(f"{e.get('field')}: {e.get('message')}" for e in self.errors)
        return str(self.body)[:500]

    @property
    def blames_measurements(self) -> bool:
        """The dashboard named a measurement's field (not the envelope: benchmark, run, nodes)."""
        return any(str(e.get("field", "")).startswith("measurements") for e in self.errors)


TokenSource = Callable[[], Awaitable[str | None]]


class ResultsClient(OwnsHttpClient):
    def __init__(self, url: str, token: str | None, timeout: float = 30.0, verify: Any = True,
                 token_source: TokenSource | None = None, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/") + INGEST_PATH
        self._token_source = token_source
        self._reload = False  # re-read the token before the next attempt (set after a failure)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0),
                                         headers={"User-Agent": "tpcmesh-operator"}, verify=verify,
                                         transport=transport)
        self._set_token(token)

    def _set_token(self, token: str | None) -> None:
        self._token = token
        if token:
            self._client.headers["Authorization"] = f"Token {token}"
        else:
            self._client.headers.pop("Authorization", None)

    async def _reload_token(self) -> bool:
        """Read the token again; True if it changed. A missing Secret keeps the token we have."""
        if self._token_source is None:
            return False
        try:
            token = await self._token_source()
        except LookupError as e:
            log.warning("Reading the results token failed, keeping the current one: %s", e)
            return False
        changed = token != self._token
        if changed:
            log.info("Reloaded the results token for %s", self.url)
            self._set_token(token)
        return changed

    async def post_batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """One attempt (plus one more right away if a 401 came with a token that has since changed).
        Returns the dashboard's answer {created, duplicates, ids}."""
        r = await self._post_authenticated(self.url, batch)
        return self._read(self.url, r, len(batch.get("measurements") or []))

    async def post_loss(self, cluster: str, summaries: Sequence[Mapping[str, Any]],
                        mesh: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """POST /api/v1/loss/ingest/ {cluster, summaries} (at most LOSS_MAX_BATCH; idempotent on node, peer,
        family and period), with the same token: {accepted, duplicates}, or BatchRejected (400/422, its errors
        name the refused summaries by `index`), BatchTooLarge (413), DeliveryFailed (anything else). `mesh`:
        {benchmark, nodes} of the probe mesh, whose members the dashboard attaches to the benchmark."""
        url = self.url.removesuffix(INGEST_PATH) + LOSS_INGEST_PATH
        r = await self._post_authenticated(url, {"cluster": cluster, "summaries": list(summaries), **(mesh or {})})
        return self._read(url, r, len(summaries), ("accepted", "duplicates"), "loss summaries")

    async def _post_authenticated(self, url: str, body: Mapping[str, Any]) -> httpx.Response:
        """One attempt (plus one more right away if a 401 came with a token that has since changed)."""
        if self._reload:
            await self._reload_token()
        self._reload = True  # until an attempt is read by the dashboard (_settled)
        r = await self._post(body, url)
        if r.status_code == 401 and await self._reload_token():
            r = await self._post(body, url)
        return r

    def _read(self, url: str, r: httpx.Response, count: int, counts: tuple[str, str] = ("created", "duplicates"),
              what: str = "measurements") -> dict[str, Any]:
        """The answer (_answer); once the dashboard has read the body (acknowledged or refused), the token works."""
        try:
            out = _answer(url, r, count, counts, what)
        except BatchRejected:
            self._reload = False
            raise
        self._reload = False
        return out

    async def active_maintenance(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """The dashboard's maintenance windows in force now (GET /api/v1/maintenance/?active=true, every page); of
        `cluster`'s nodes when given (federation: another cluster's node may have the same name)."""
        query = {"active": "true", "limit": "1000", **({"cluster": cluster} if cluster else {})}
        url: str | None = self.url.removesuffix(INGEST_PATH) + "/api/v1/maintenance/?" + urlencode(query)
        out: list[dict[str, Any]] = []
        while url:
            try:
                r = await self._client.get(url, headers={"Accept": "application/json"})
                r.raise_for_status()
                body = r.json()
            except (httpx.HTTPError, ValueError) as e:
                raise DeliveryFailed(f"GET {url} failed: {type(e).__name__}: {e}") from e
            out += body.get("results") or []
            url = body.get("next")
        return out

    async def advice(self, source: str, destination: str, protocol: str, *, benchmark: str, cluster: str | None,
                     bounds: Mapping[str, int]) -> dict[str, Any]:
        """GET /api/v1/advice/ for one link of a benchmark (spec.optimize, plan/optimizer.py): the answer, or
        AdviceNotFound (the dashboard knows neither node or the benchmark yet) / AdviceUnavailable (why not)."""
        def ref(node: str) -> str:  # federation: another cluster may have a node of the same name
            return f"{cluster}:{node}" if cluster else node

        query = {"source": ref(source), "destination": ref(destination), "protocol": protocol,
                 "benchmark": benchmark, **({"cluster": cluster} if cluster else {}), **bounds}
        url = self.url.removesuffix(INGEST_PATH) + "/api/v1/advice/?" + urlencode(query)
        try:
            r = await self._client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as e:
            raise AdviceUnavailable(f"GET {url} failed: {type(e).__name__}: {e}") from e
        if r.status_code == 404:
            raise AdviceNotFound(r.text[:200])
        if r.status_code != 200:
            raise AdviceUnavailable(f"GET {url}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            body = r.json()
        except ValueError as e:
            raise AdviceUnavailable(f"GET {url}: not JSON: {e}") from e
        if not isinstance(body, dict):
            raise AdviceUnavailable(f"GET {url}: expected an object, got {str(body)[:100]}")
        return body

    async def open_problems(self, namespace: str, name: str, cluster: str | None) -> list[dict[str, Any]]:
        """POST /api/v1/problems/evaluate/: the dashboard diagnoses the benchmark's newest cells and runs its problem
        rules now; the benchmark's open problems. ProblemsUnavailable (why) when it cannot answer."""
        url = self.url.removesuffix(INGEST_PATH) + "/api/v1/problems/evaluate/"
        body = {"namespace": namespace, "name": name, **({"cluster": cluster} if cluster else {})}
        try:
            r = await self._client.post(url, json=body)
        except httpx.HTTPError as e:
            raise ProblemsUnavailable(f"POST {url} failed: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise ProblemsUnavailable(f"POST {url}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            problems = r.json()["problems"]
        except (ValueError, KeyError, TypeError):
            raise ProblemsUnavailable(f"POST {url}: not the answer expected: {r.text[:200]}") from None
        return [p for p in problems if isinstance(p, dict)]

    async def _post(self, batch: Mapping[str, Any], url: str | None = None) -> httpx.Response:
        url = url or self.url
        try:
            return await self._client.post(url, json=dict(batch))
        except httpx.HTTPError as e:
            raise DeliveryFailed(f"POST {url} failed: {type(e).__name__}: {e}") from e


def _answer(url: str, r: httpx.Response, count: int, counts: tuple[str, str] = ("created", "duplicates"),
            what: str = "measurements") -> dict[str, Any]:
    """The acknowledgement in a response (its two `counts` add up to `count`), or the exception that says what to
    do with the batch. A refusal (400/422) is raised as BatchRejected even when the dashboard read the batch: the
    token works."""
    try:
        body: Any = r.json()
    except ValueError:
        body = r.text[:500]
    if r.status_code in REFUSED:
        raise BatchRejected(r.status_code, body)
    if r.status_code == 413:
        raise BatchTooLarge(f"POST {url}: HTTP 413: the batch of {count} {what} is too large: {body}")
    if not 200 <= r.status_code < 300:
        raise DeliveryFailed(f"POST {url}: HTTP {r.status_code}: {body}")
    if not isinstance(body, dict) or not all(isinstance(body.get(k), int) for k in counts) \
            or body[counts[0]] + body[counts[1]] != count:
        raise DeliveryFailed(f"POST {url}: HTTP {r.status_code} without an acknowledgement of the {count} "
                             f"{what} (is the URL the dashboard's?): {str(body)[:300]}")
    return body


@dataclass
class Outcome:
    """What a delivery attempt settled: measurements acknowledged, and those refused with the dashboard's reason."""

    acknowledged: list[Mapping[str, Any]] = field(default_factory=list)
    rejected: list[tuple[Mapping[str, Any], str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.acknowledged or self.rejected)


Post = Callable[[dict[str, Any]], Awaitable[Any]]


async def post_bisecting(post: Post, envelope: Callable[[list[Mapping[str, Any]]], dict[str, Any]],
                         measurements: Sequence[Mapping[str, Any]], outcome: Outcome) -> None:
    """Post the measurements in one batch; when the dashboard refuses some of them, split the batch in halves
    until each refused one stands alone. `outcome` fills as batches settle, so what was settled before a
    temporary failure (raised) is known to the caller."""
    ms = list(measurements)
    try:
        await post(envelope(ms))
    except BatchRejected as e:
        if not e.blames_measurements:
            raise DeliveryFailed(f"{e} (names no measurement: kept for a later attempt)") from e
        if len(ms) == 1:
            outcome.rejected.append((ms[0], e.reason))
            return
        mid = len(ms) // 2
        await post_bisecting(post, envelope, ms[:mid], outcome)
        await post_bisecting(post, envelope, ms[mid:], outcome)
        return
    outcome.acknowledged.extend(ms)


def _temporary(e: BaseException) -> bool:
    return isinstance(e, DeliveryFailed) and not isinstance(e, BatchTooLarge)


async def deliver_with_backoff(
    client: ResultsClient,
    batch: Mapping[str, Any],
    max_seconds: float,
    initial: float = 0.5,
    maximum: float = 30.0,
) -> dict[str, Any]:
    """Post one batch, retrying temporary failures with exponential backoff for up to max_seconds (a 413 is
    raised at once: the caller splits the batch)."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_temporary),
        wait=wait_exponential(multiplier=initial, max=maximum),
        stop=stop_after_delay(max_seconds),
        reraise=True,
    ):
        with attempt:
            return await client.post_batch(batch)
    raise DeliveryFailed("unreachable")  # pragma: no cover
