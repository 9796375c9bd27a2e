"""What the results client does with each kind of answer, the token reload, and bisecting around refused records.

The client's own httpx stack runs; only the network under it is httpx's in-process transport (the real dashboard
is in tests/integration/operator/test_operator_delivery.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from tpcmesh_operator.run.delivery import (
    BatchRejected,
    BatchTooLarge,
    DeliveryFailed,
    Outcome,
    ResultsClient,
    post_bisecting,
)
from tpcmesh_operator.run.outbox import MAX_REJECTED, migrate, settle

BATCH = {"benchmark": {"namespace": "ns", "name": "b"}, "run": {"uid": "u", "name": "r"},
         "measurements": [{"id": "1"}, {"id": "2"}]}


def client(handler, **kw) -> ResultsClient:
    return ResultsClient("http://dashboard.test", kw.pop("token", "t0"), transport=httpx.MockTransport(handler), **kw)


def post(c: ResultsClient, batch=BATCH) -> dict:
    async def go():
        async with c:
            return await c.post_batch(batch)
    return asyncio.run(go())


@pytest.mark.parametrize("status,body,kind", [
    (404, {"detail": "Not found."}, DeliveryFailed),  # a wrong URL: nothing is dropped
    (413, "Request Entity Too Large", BatchTooLarge),  # an ingress limit: smaller batches
    (500, "oops", DeliveryFailed),
    (502, "bad gateway", DeliveryFailed),
    (302, "", DeliveryFailed),  # a redirect (http -> https) is no acknowledgement
    (401, {"detail": "bad token"}, DeliveryFailed),
    (409, {}, DeliveryFailed),
    (200, "<html>login</html>", DeliveryFailed),  # not the dashboard's answer
    (200, {"created": 1, "duplicates": 0, "ids": []}, DeliveryFailed),  # one of two acknowledged
])
def test_only_an_acknowledgement_of_every_measurement_is_success(status, body, kind) -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
    with pytest.raises(kind) as e:
        post(client(handler))
    assert f"HTTP {status}" in str(e.value)


def test_acknowledged_and_refused_batches() -> None:
    answers = iter([
        httpx.Response(200, json={"created": 1, "duplicates": 1, "ids": ["1"]}),
        httpx.Response(400, json={"detail": "Invalid ingest batch.", "errors": [
            {"field": "measurements[1].destination", "message": "destination equals source"}]}),
        httpx.Response(400, json={"detail": "Invalid ingest batch.", "errors": [
            {"field": "run.uid", "message": "This field is required."}]}),
    ])
    c = client(lambda req: next(answers))

    async def go() -> tuple[dict, BatchRejected, BatchRejected]:
        async with c:
            ok = await c.post_batch(BATCH)
            refused = []
            for _ in range(2):
                try:
                    await c.post_batch(BATCH)
                except BatchRejected as e:
                    refused.append(e)
            return ok, refused[0], refused[1]

    ok, records, envelope = asyncio.run(go())
    assert ok == {"created": 1, "duplicates": 1, "ids": ["1"]}
    assert records.blames_measurements and "measurements[1].destination: destination equals source" in records.reason
    assert not envelope.blames_measurements and "run.uid" in envelope.reason


def test_token_is_read_again_after_a_401_and_after_a_failure() -> None:
    secret = {"token": "old"}
    reads = []

    async def source() -> str:
        reads.append(secret["token"])
        return secret["token"]

    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers.get("Authorization"))
        if req.headers.get("Authorization") != "Token new":
            return httpx.Response(401, json={"detail": "Invalid token."})
        return httpx.Response(200, json={"created": 2, "duplicates": 0, "ids": ["1", "2"]})

    c = client(handler, token="old", token_source=source)

    async def go():
        async with c:
            with pytest.raises(DeliveryFailed):  # 401, and the Secret still holds the old token
                await c.post_batch(BATCH)
            secret["token"] = "new"  # rotated
            return await c.post_batch(BATCH)  # read again before this attempt (the last one failed)

    assert asyncio.run(go())["created"] == 2
    assert seen == ["Token old", "Token new"] and reads == ["old", "new"]
    # a 401 with a token that changed meanwhile is retried at once with the new one
    secret["token"], seen[:], reads[:] = "new", [], []
    c = client(handler, token="old", token_source=source)
    assert post(c)["created"] == 2 and seen == ["Token old", "Token new"]


def test_a_missing_secret_keeps_the_current_token() -> None:
    async def source() -> str:
        raise LookupError("Secret ns/results: Not Found")

    c = client(lambda req: httpx.Response(401, json={}), token="t0", token_source=source)
    with pytest.raises(DeliveryFailed, match="HTTP 401"):
        post(c)


def bisect(ms: list[dict], bad: set[str], envelope_bad: bool = False) -> tuple[Outcome, list[int]]:
    """post_bisecting against a dashboard that refuses any batch holding a bad id, naming the first one."""
    sizes: list[int] = []

    async def post_(batch: dict) -> dict:
        got = batch["measurements"]
        sizes.append(len(got))
        if envelope_bad:
            raise BatchRejected(400, {"errors": [{"field": "nodes[0].name", "message": "too long"}]})
        for i, m in enumerate(got):
            if m["id"] in bad:
                raise BatchRejected(400, {"errors": [{"field": f"measurements[{i}].source", "message": "bad"}]})
        return {"created": len(got), "duplicates": 0}

    out = Outcome()
    asyncio.run(post_bisecting(post_, lambda ms_: {"measurements": ms_}, ms, out))
    return out, sizes


def test_bisecting_sets_aside_only_the_refused_records() -> None:
    ms = [{"id": str(i)} for i in range(500)]
    out, sizes = bisect(ms, {"137"})
    assert [m["id"] for m, _ in out.rejected] == ["137"] and "measurements[0].source: bad" in out.rejected[0][1]
    assert sorted(int(m["id"]) for m in out.acknowledged) == [i for i in range(500) if i != 137]
    assert len(sizes) <= 2 * 9 + 1  # log2(500) levels, two halves each
    out, _ = bisect(ms, {"0", "499", "250"})
    assert {m["id"] for m, _ in out.rejected} == {"0", "250", "499"} and len(out.acknowledged) == 497
    out, _ = bisect(ms, set())
    assert len(out.acknowledged) == 500 and not out.rejected


def test_a_refused_envelope_drops_nothing() -> None:
    with pytest.raises(DeliveryFailed, match="names no measurement"):
        bisect([{"id": "1"}, {"id": "2"}], set(), envelope_bad=True)


def test_settle_keeps_a_bounded_list_of_refused_records_and_counts_all() -> None:
    status = {"outbox": [{"id": str(i), "protocol": "rtt"} for i in range(60)], "delivered": 3, "rejected": 2}
    migrate(status)  # the old count of records dropped without a trace carries over
    assert status["rejected"] == [] and status["rejectedCount"] == 2
    out = Outcome(acknowledged=status["outbox"][:10], rejected=[(m, "x" * 5000) for m in status["outbox"][10:40]])
    settle(status, out, "2026-01-01T00:00:00Z")
    assert [m["id"] for m in status["outbox"]] == [str(i) for i in range(40, 60)]
    assert (status["delivered"], status["rejectedCount"], status["undelivered"]) == (13, 32, 20)
    assert len(status["rejected"]) == MAX_REJECTED and status["rejected"][-1]["measurement"]["id"] == "39"
    assert len(status["rejected"][0]["reason"]) == 1000
    json.dumps(status)


def test_benchmarks_without_results_use_the_operators_default_endpoint(tmp_path):
    """spec.results wins; without it the chart's TPCMESH_OPERATOR_RESULTS_URL, with the token re-read from its file
    (a rotated Secret reaches the mounted file); with neither, no endpoint."""
    from tpcmesh_operator.config import Settings, SettingsError
    from tpcmesh_operator.plan.spec import parse_spec
    from tpcmesh_operator.run.driver import results_client

    token = tmp_path / "token"
    token.write_text("first\n")
    settings = Settings.from_env({"TPCMESH_OPERATOR_RESULTS_URL": "http://dash.ns.svc:80",
                                  "TPCMESH_OPERATOR_RESULTS_TOKEN_FILE": str(token)})
    events: list[tuple[str, ...]] = []

    async def made(spec, s):
        c = await results_client(spec, "ns", s, lambda *e: events.append(e))
        if c is None:
            return None
        try:
            first = c._client.headers.get("Authorization")
            token.write_text("second\n")
            reloaded = await c._reload_token()
            return c.url, first, reloaded, c._client.headers.get("Authorization")
        finally:
            await c.aclose()

    bare = parse_spec({"protocols": ["iperf3"]}, "spec")
    assert asyncio.run(made(bare, settings)) == ("http://dash.ns.svc:80/api/v1/ingest/", "Token first", True,
                                                 "Token second")
    own = parse_spec({"protocols": ["iperf3"], "results": {"url": "https://elsewhere.example"}}, "spec")
    assert asyncio.run(made(own, settings))[0] == "https://elsewhere.example/api/v1/ingest/"
    assert asyncio.run(made(bare, Settings())) is None
    with pytest.raises(SettingsError, match="TPCMESH_OPERATOR_RESULTS_URL: expected an http"):
        Settings.from_env({"TPCMESH_OPERATOR_RESULTS_URL": "dash.ns.svc"})
