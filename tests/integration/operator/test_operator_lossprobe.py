"""spec.lossProbe kept running by the operator's pass (run/lossprobe.py) against three REAL agents on 127.0.1.x
(their TWAMP-light probes on a UDP port of their own) and a recording HTTPS endpoint in place of the dashboard's
`POST /api/v1/loss/ingest/` (another branch builds it; this endpoint answers by the contract: {accepted,
duplicates}, 422 naming refused summaries by index, 413 past a body limit, or 503).

Checked: each agent gets the other agents as peers, and only once (the next pass finds nothing to change); two
benchmarks on shared agents merge (union of peers, the higher rate); turning one off leaves its agents the
other's probe or none. Summaries reach the endpoint with the operator's token and cluster name, without the
agent's outbox ids; they stay at the agent while the endpoint answers 503 and are acknowledged only after its 2xx
(the agent's acknowledged count, read by the endpoint while it holds the answer, has not moved); summaries the
endpoint refuses are logged in full with its reason and acknowledged, the rest delivered; batches too large for
the endpoint are halved."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from collections.abc import Sequence

import httpx
import pytest
from aiohttp import web
from tpcmesh_operator.plan.spec import BenchmarkSpec
from tpcmesh_operator.run.agents import Agent, AgentsClient
from tpcmesh_operator.run.delivery import ResultsClient
from tpcmesh_operator.run.lossprobe import Benchmark, run_pass

pytestmark = pytest.mark.integration

LOSS_PORT = 18873  # not the well-known 863: the suite may run without root
CLUSTER = "east"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("loss-token") / "token"
    f.write_text("mesh-" + uuid.uuid4().hex + "\n")
    return f


@pytest.fixture(scope="module")
def handles(module_agent_factory, token_file):
    return module_agent_factory.many(3, loss_port=LOSS_PORT, token_file=token_file)


@pytest.fixture(scope="module")
def agents(handles) -> list[Agent]:
    return [Agent(node=h.name, address=h.address, ports={"control": h.api_port, "loss": LOSS_PORT}) for h in handles]


def probing(name: str, spec: dict | None = None, **loss) -> Benchmark:
    return Benchmark("default", name, {**(spec or {}), "lossProbe": {"enabled": True, "periodSeconds": 10, **loss}})


def directory(by_benchmark: dict[str, Sequence[Agent]]):
    """The agents each benchmark selects (the pass lists each distinct selection once: they must differ)."""
    async def agents_of(b: Benchmark, spec: BenchmarkSpec) -> Sequence[Agent]:
        return by_benchmark[b.name]
    return agents_of


def config(h) -> dict:
    return h.get("/api/v1/loss").json()["config"]


def peers(h) -> set[tuple[str, str, int]]:
    return {(p["name"], p["address"], p["port"]) for p in config(h)["peers"]}


async def test_each_agent_probes_the_others_merged_across_benchmarks_and_released(handles, agents, token_file):
    a, b, c = handles
    mesh, pair = probing("mesh", ratePps=5), probing("pair", {"nodeSelector": {"pair": "yes"}}, ratePps=20)
    agents_of = directory({"mesh": agents, "pair": agents[:2]})
    async with AgentsClient(token_file.read_text().strip(), a.ca_file) as client:
        report = await run_pass(mesh, [mesh], agents_of, client, None, CLUSTER)
        assert (report.agents, report.configured) == (3, 3)
        assert report.problems == ["no results endpoint (spec.results, or the operator's default): summaries stay "
                                   "at the agents"]
        assert peers(a) == {(b.name, b.address, LOSS_PORT), (c.name, c.address, LOSS_PORT)}
        assert config(a)["rate_pps"] == 5 and config(a)["period_s"] == 10
        assert (await run_pass(mesh, [mesh], agents_of, client, None, CLUSTER)).configured == 0  # unchanged

        # a second benchmark on two of them: its pass sets the merge on its agents, mesh's pass agrees
        assert (await run_pass(pair, [mesh, pair], agents_of, client, None, CLUSTER)).configured == 2
        assert (await run_pass(mesh, [mesh, pair], agents_of, client, None, CLUSTER)).configured == 0
        assert config(a)["rate_pps"] == config(b)["rate_pps"] == 20 and config(c)["rate_pps"] == 5
        assert peers(a) == {(b.name, b.address, LOSS_PORT), (c.name, c.address, LOSS_PORT)}

        # mesh turned off: a and b keep pair's probe of each other, c probes nobody
        report = await run_pass(mesh, [pair], agents_of, client, None, CLUSTER, release=True)
        assert report.configured == 3 and report.agents == 0
        assert peers(a) == {(b.name, b.address, LOSS_PORT)} and peers(b) == {(a.name, a.address, LOSS_PORT)}
        assert peers(c) == set() and config(a)["rate_pps"] == 20
        await run_pass(pair, [], agents_of, client, None, CLUSTER, release=True)
        assert peers(a) == peers(b) == set()


async def test_an_agent_without_its_probe_is_named_once(handles, agents, token_file, module_agent_factory):
    dark = module_agent_factory(token_file=token_file, loss_port=0)
    a = handles[0]
    mesh = probing("dark")
    pair = [agents[0], Agent(node=dark.name, address=dark.address, ports={"control": dark.api_port})]
    async with AgentsClient(token_file.read_text().strip(), a.ca_file) as client:
        report = await run_pass(mesh, [mesh], directory({"dark": pair}), client, None, CLUSTER)
        assert report.configured == 1 and report.problems[0] == \
            f"{dark.name}: the agent's loss probe is not running: off (loss_port 0)"
        assert len(report.problems) == 2 and "no results endpoint" in report.problems[1]
        assert peers(a) == {(dark.name, dark.address, 863)}  # still a member: its loss is the mesh's to see
        await run_pass(mesh, [], directory({"dark": pair}), client, None, CLUSTER, release=True)
        assert peers(a) == set()


class RecordingDashboard:
    """HTTPS, answering POST /api/v1/loss/ingest/ by the contract; `mode` 503 or 200; summaries from `refuse`
    (node, peer) are refused by index (422) until a request holds none of them."""

    def __init__(self, pki, handles, token: str) -> None:
        self.pki = pki
        self.handles = {h.name: h for h in handles}
        self.token = token
        self.mode: int | str = 503
        self.max_batch = 1000  # more summaries in one request: 413, as an ingress's body limit answers
        self.refuse: set[tuple[str, str]] = set()
        self.requests: list[dict] = []
        self.members: list[dict] = []
        self.stored: dict[tuple, dict] = {}

    async def acknowledged(self, node: str) -> int:
        h = self.handles[node]
        async with httpx.AsyncClient(verify=h.ssl_context(), headers={"Authorization": f"Bearer {h.token}"}) as c:
            return (await c.get(f"{h.base_url}/api/v1/loss")).json()["outbox"]["acknowledged"]

    async def ingest(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "benchmark" in body:  # a pass's mesh members (summaries empty): recorded apart, always taken
            self.members.append(body)
            return web.json_response({"accepted": 0, "duplicates": 0})
        nodes = {s["node"] for s in body["summaries"]}
        self.requests.append({"auth": request.headers.get("Authorization"), "body": body,
                              "acknowledged": {n: await self.acknowledged(n) for n in nodes}})
        if self.mode == "short":  # a 2xx that does not account for every summary (not the dashboard's answer)
            return web.json_response({"accepted": len(body["summaries"]) - 1, "duplicates": 0})
        if self.mode != 200:
            return web.json_response({"detail": "unavailable"}, status=self.mode)
        if len(body["summaries"]) > self.max_batch:
            return web.Response(text="413 Request Entity Too Large", status=413)
        bad = [i for i, s in enumerate(body["summaries"]) if (s["node"], s["peer"]) in self.refuse]
        if bad:
            return web.json_response({"errors": [{"index": i, "field": "rtt_ms", "message": "refused by the test"}
                                                 for i in bad]}, status=422)
        new = 0
        for s in body["summaries"]:
            key = (body["cluster"], s["node"], s["peer"], s["family"], s["period_start"])
            new += key not in self.stored
            self.stored[key] = s
        return web.json_response({"accepted": new, "duplicates": len(body["summaries"]) - new})

    async def __aenter__(self) -> RecordingDashboard:
        app = web.Application()
        app.router.add_post("/api/v1/loss/ingest/", self.ingest)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        cert, key = self.pki.host_cert("dashboard", ["127.0.0.1"])
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.url = f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def outbox(h) -> dict:
    return h.get("/api/v1/loss").json()["outbox"]


async def test_summaries_reach_the_dashboard_acknowledged_only_after_its_2xx(handles, agents, token_file, tpcmesh_pki,
                                                                             caplog):
    a, b, c = handles
    mesh = probing("mesh", ratePps=20)
    agents_of = directory({"mesh": agents})
    token = "results-" + uuid.uuid4().hex
    caplog.set_level(logging.WARNING, logger="tpcmesh_operator.run.lossprobe")
    async with RecordingDashboard(tpcmesh_pki, handles, token) as dash, \
            AgentsClient(token_file.read_text().strip(), a.ca_file) as client, \
            ResultsClient(dash.url, token, verify=ssl.create_default_context(cafile=str(a.ca_file))) as results:
        await run_pass(mesh, [mesh], agents_of, client, results, CLUSTER)
        deadline = time.monotonic() + 40  # a 10 s period (the first one partial), then the 5 s loss timeout
        while not all(outbox(h)["pending"] >= 2 for h in handles):
            assert time.monotonic() < deadline, [outbox(h) for h in handles]
            await asyncio.sleep(0.5)
        before = {h.name: outbox(h) for h in handles}

        # the dashboard away: nothing acknowledged, everything kept, the pass says why per agent
        report = await run_pass(mesh, [mesh], agents_of, client, results, CLUSTER)
        assert report.collected == 0 and len(report.problems) == 3
        assert all("HTTP 503" in p for p in report.problems), report.problems
        for h in handles:
            assert outbox(h)["acknowledged"] == before[h.name]["acknowledged"]
            assert outbox(h)["pending"] >= before[h.name]["pending"]
        assert len(dash.requests) == 3
        # a 2xx that accounts for fewer than were sent acknowledges nothing either
        dash.mode = "short"
        report = await run_pass(mesh, [mesh], agents_of, client, results, CLUSTER)
        assert report.collected == 0 and len(report.problems) == 3
        assert all("without an acknowledgement of the" in p for p in report.problems), report.problems
        assert all(outbox(h)["acknowledged"] == before[h.name]["acknowledged"] for h in handles)

        # back behind a body limit (1 summary a request: the batches halve), refusing a's summaries of c: those
        # logged and set aside, the rest delivered, all acknowledged
        dash.mode, dash.refuse, dash.max_batch = 200, {(a.name, c.name)}, 1
        dash.requests.clear()
        report = await run_pass(mesh, [mesh], agents_of, client, results, CLUSTER)
        assert report.problems == []
        assert report.refused >= 1 and report.collected >= 5
        for h in handles:
            assert outbox(h)["acknowledged"] >= before[h.name]["pending"]  # what waited is gone from the agent
        assert any(len(r["body"]["summaries"]) > 1 for r in dash.requests)  # refused as too large, then halved
        for r in dash.requests:  # held answers: the agents had acknowledged nothing of the batch yet
            assert r["auth"] == f"Token {token}"
            assert r["body"]["cluster"] == CLUSTER
            for node, acked in r["acknowledged"].items():
                assert acked == before[node]["acknowledged"], (node, r["acknowledged"], before)
        stored = list(dash.stored.values())
        assert len(stored) == report.collected
        assert all("id" not in s for s in stored)
        pairs = {(s["node"], s["peer"]) for s in stored}
        everyone = {(x.name, y.name) for x in handles for y in handles if x is not y}
        assert pairs == everyone - {(a.name, c.name)}
        # each pass also named the mesh's members, attached to the benchmark (a probe-only mesh's grid)
        assert len(dash.members) == 4
        assert all(m["benchmark"] == {"namespace": "default", "name": "mesh"} and m["summaries"] == []
                   for m in dash.members), dash.members
        assert {n["name"] for n in dash.members[-1]["nodes"]} == {h.name for h in handles}
        for s in stored:
            assert s["family"] == 4 and s["sent"] > 0 and s["lost"] == 0 and s["rtt_ms"]["median"] < 10
        refused = [r.getMessage() for r in caplog.records if "Dashboard refused the loss summary" in r.getMessage()]
        assert len(refused) == report.refused and all(f"{a.name} -> {c.name}" in m for m in refused)
        assert all("rtt_ms: refused by the test" in m and '"period_start"' in m for m in refused)

        # again: nothing new to post twice (the agents forgot what was acknowledged)
        dash.requests.clear()
        again = await run_pass(mesh, [mesh], agents_of, client, results, CLUSTER)
        assert again.problems == [] and again.collected == sum(len(r["body"]["summaries"]) for r in dash.requests)
        await run_pass(mesh, [], agents_of, client, None, CLUSTER, release=True)
