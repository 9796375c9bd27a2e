"""The transfer runner with deliberately broken movers: it always ends with a record and is never left busy."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest
from tpcmesh_agent.config import Settings
from tpcmesh_agent.files import FileSets
from tpcmesh_agent.metrics import AgentMetrics
from tpcmesh_agent.movers.base import FileResult, Mover
from tpcmesh_agent.runner import ApiError, TransferRunner


class Raises(Mover):
    protocol = "builtin"

    async def run(self, job, progress):
        raise RuntimeError("boom")


class Malformed(Mover):
    protocol = "builtin"

    async def run(self, job, progress):
        return [FileResult(name=f.name, size=f.size, bytes=f.size, started_at="yesterday",  # type: ignore[arg-type]
                           finished_at="today") for f in job.files]  # type: ignore[arg-type]


class Brief(Mover):
    protocol = "builtin"

    async def run(self, job, progress):
        await asyncio.sleep(0.3)
        return [FileResult(name=f.name, size=f.size, bytes=f.size) for f in job.files]


class Hangs(Mover):
    protocol = "builtin"

    async def run(self, job, progress):
        await asyncio.sleep(3600)


def _runner(tmp_path: Path, mover: Mover) -> TransferRunner:
    token = tmp_path / "token"
    token.write_text("x" * 20)
    s = Settings(address="127.0.1.200", data_dir=tmp_path, token_file=token, allow_plain_http=True)
    return TransferRunner(s, {"builtin": mover}, {}, FileSets(s.sets_dir, s.budget_bytes), AgentMetrics(dict))


def _body(**over):
    return {"test_id": str(uuid.uuid4()), "protocol": "builtin", "source": {"host": "127.0.1.201", "port": 9080},
            "file_set": {"count": 2, "size": 10}, **over}


async def _finish(runner: TransferRunner, test_id: str) -> dict:
    for _ in range(200):
        rec = await runner.get(test_id)
        if rec["status"] != "running":
            return rec
        await asyncio.sleep(0.01)
    raise AssertionError("still running")


@pytest.mark.parametrize("mover, words", [(Raises(), "mover error: RuntimeError: boom"),
                                          (Malformed(), "agent error building the record: TypeError")])
async def test_broken_movers_end_in_a_failed_record_and_the_runner_is_free(tmp_path, mover, words):
    runner = _runner(tmp_path, mover)
    code, rec = runner.submit(_body())
    assert code == 202 and rec["status"] == "running"
    rec = await _finish(runner, rec["test_id"])
    assert rec["status"] == "failed" and rec["error"].startswith(words)
    assert len(rec["files"]) == 2 and runner.running is None
    code, _ = runner.submit(_body())  # the next test is accepted
    assert code == 202
    await _finish(runner, runner.running.job.test_id)  # type: ignore[union-attr]


async def test_a_mover_that_ignores_the_timeout_is_stopped_by_the_runner(tmp_path, monkeypatch):
    monkeypatch.setattr("tpcmesh_agent.runner.TIMEOUT_GRACE", 0.1)
    runner = _runner(tmp_path, Hangs())
    _, rec = runner.submit(_body(timeout_seconds=0.2))
    rec = await _finish(runner, rec["test_id"])
    assert rec["status"] == "failed" and rec["error"] == "timed out after 0.2 s (0 bytes received)"
    assert all(f["error"] == rec["error"] and f["bytes"] == 0 for f in rec["files"])


async def test_cancel_of_a_mover_without_stop_test(tmp_path):
    runner = _runner(tmp_path, Hangs())
    _, rec = runner.submit(_body())
    await asyncio.sleep(0.05)
    rec = await runner.cancel(rec["test_id"])
    assert rec["status"] == "cancelled" and rec["error"] == "cancelled by request after 0 bytes"
    assert runner.running is None


@pytest.mark.parametrize("destination", [None, "store", "sink"])
def test_iperf3_is_a_sink_and_needs_no_file_set_budget(tmp_path, destination):
    """iperf3 moves no file: whatever destination was asked (the operator sends one per benchmark), it stores
    nothing, so a file set far beyond the budget does not matter and the record says sink."""
    runner = _runner(tmp_path, Hangs())
    over = {} if destination is None else {"destination": destination}
    body = _body(protocol="iperf3", file_set={"count": 11, "size": 60 * 10**9}, **over)  # 660 GB, budget 40 GB
    job = runner.parse(body)
    assert job.destination_dir is None
    with pytest.raises(ApiError, match="does not fit the budget"):  # the same set is refused for a store
        runner.parse({**body, "protocol": "builtin", "destination": "store"})


JWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJuIn0.c2lnbmF0dXJl"


@pytest.mark.parametrize("protocol", ["xrootd-https", "builtin"])
def test_tokens_are_taken_and_kept_out_of_reprs(tmp_path, protocol):
    runner = _runner(tmp_path, Hangs())
    job = runner.parse(_body(protocol=protocol, tokens={"read": JWT, "create": JWT + "x"}))
    assert job.tokens is not None and (job.tokens.read, job.tokens.create) == (JWT, JWT + "x")
    assert JWT not in repr(job) and "c2lnbmF0dXJl" not in repr(job)
    assert runner.parse(_body(protocol=protocol)).tokens is None


@pytest.mark.parametrize(("over", "says"), [
    ({"protocol": "gridftp", "tokens": {"read": JWT, "create": JWT}},
     "tokens apply to xrootd-https, builtin, xrootd-root only, not 'gridftp'"),
    ({"protocol": "xrootd-root", "tokens": {"read": JWT, "create": JWT}},
     "tokens apply to xrootd-root only as an external source's read token"),
    ({"protocol": "xrootd-https", "tokens": {"read": JWT}}, "tokens must be an object {read, create}"),
    ({"protocol": "xrootd-https", "tokens": "x"}, "tokens must be an object"),
    ({"protocol": "xrootd-https", "tokens": {"read": "not a jwt", "create": JWT}}, "tokens.read must be a compact JWT"),
    ({"protocol": "xrootd-https", "tokens": {"read": JWT, "create": JWT + "\nX"}}, "tokens.create must be"),
    ({"protocol": "xrootd-https", "tokens": {"read": JWT + "\n", "create": JWT}}, "tokens.read must be"),
    ({"protocol": "xrootd-https", "tokens": {"read": JWT, "create": "a." * 5000}}, "tokens.create must be"),
])
def test_bad_tokens_are_refused_naming_the_field_not_the_value(tmp_path, over, says):
    runner = _runner(tmp_path, Hangs())
    with pytest.raises(ApiError, match=re.escape(says)) as e:
        runner.parse(_body(**over))
    assert "not a jwt" not in str(e.value.args) and JWT not in str(e.value.args)


def test_an_external_source_path_and_a_remote_destination_are_taken(tmp_path):
    """An external endpoint's set directory (source.path) and a push into one (remote_destination): nothing is
    stored here, davs is https, the remote's token stays out of reprs."""
    runner = _runner(tmp_path, Hangs())
    job = runner.parse(_body(protocol="xrootd-https", source={"host": "storage.site-x.example", "port": 1094,
                                                              "path": "/store/tpcmesh/ns.b/sets"},
                             tokens={"read": JWT, "create": None}))
    assert job.source.path == "/store/tpcmesh/ns.b/sets" and not job.source.is_agent
    assert job.tokens is not None and job.tokens.create is None and job.destination_dir is not None
    push = runner.parse(_body(protocol="xrootd-https", remote_destination={
        "url": "davs://storage.site-x.example:1094/store/tpcmesh/ns.b/incoming", "token": "site-token.x"}))
    assert push.remote is not None and push.destination_dir is None and push.remote.remove
    assert push.remote.url == "https://storage.site-x.example:1094/store/tpcmesh/ns.b/incoming"
    assert "site-token" not in repr(push)
    root = runner.parse(_body(protocol="xrootd-root", remote_destination={
        "url": "root://storage.site-x.example:1094//store/tpcmesh/ns.b/incoming", "token": "site-token.x"}))
    assert root.remote is not None and root.remote.url.endswith(":1094//store/tpcmesh/ns.b/incoming")
    pull = runner.parse(_body(protocol="xrootd-root", source={"host": "h", "port": 1094, "path": "/store/t/sets"},
                              tokens={"read": JWT, "create": None}))
    assert pull.tokens is not None and not pull.source.is_agent
    ftp = runner.parse(_body(protocol="gridftp", x509={"proxy": "-----BEGIN CERTIFICATE-----\nsecret-proxy\n"},
                             remote_destination={"url": "gsiftp://h:2811/store/t/incoming", "remove": False}))
    assert ftp.x509 is not None and ftp.x509.proxy and "secret-proxy" not in repr(ftp)


@pytest.mark.parametrize(("over", "says"), [
    ({"source": {"host": "h", "path": "/store/../etc"}}, "source.path must be an absolute path of plain names"),
    ({"source": {"host": "h", "path": "store"}}, "source.path must be an absolute path"),
    ({"protocol": "builtin", "source": {"host": "h", "path": "/store"}},
     "source.path applies to xrootd-https, xrootd-root, gridftp only"),
    ({"remote_destination": {"url": "davs://h/x"}, "protocol": "builtin"}, "remote_destination applies to"),
    ({"remote_destination": {"url": "davs://h/x"}, "protocol": "gridftp"}, "must be a gsiftp:// directory URL"),
    ({"x509": {"proxy": "-----BEGIN x"}, "protocol": "gridftp"}, "x509 applies to gridftp with an external"),
    ({"x509": {"proxy": "not pem"}, "protocol": "gridftp", "source": {"host": "h", "path": "/s"}},
     "x509.proxy must be PEM text"),
    ({"x509": {"cert": "-----BEGIN x"}, "protocol": "gridftp", "source": {"host": "h", "path": "/s"}},
     "x509 must be an object {proxy} or {cert, key}"),
    ({"remote_destination": {"url": "http://h/x"}}, "remote_destination.url must be an https:// or davs://"),
    ({"remote_destination": {"url": "https://h/x"}, "protocol": "xrootd-root"},
     "remote_destination.url must be a root://host:port// directory URL"),
    ({"remote_destination": {"url": "root://h//x/../y"}, "protocol": "xrootd-root"}, "remote_destination.url must"),
    ({"tokens": {"read": JWT, "create": None}, "protocol": "xrootd-root"}, "tokens apply to xrootd-root only as"),
    ({"tokens": {"read": JWT, "create": JWT}, "protocol": "xrootd-root", "source": {"host": "h", "path": "/s"}},
     "tokens apply to xrootd-root only as"),
    ({"remote_destination": {"url": "https://h/x/../y"}}, "remote_destination.url must be"),
    ({"remote_destination": {"url": "https://h/x", "token": "a b"}}, "remote_destination.token must be"),
    ({"remote_destination": {"url": "https://h/x", "extra": 1}}, "remote_destination must be an object"),
])
def test_bad_external_fields_are_refused_naming_the_field(tmp_path, over, says):
    runner = _runner(tmp_path, Hangs())
    with pytest.raises(ApiError, match=re.escape(says)):
        runner.parse(_body(**{"protocol": "xrootd-https", **over}))


async def test_a_waiting_get_answers_when_the_test_ends_or_when_the_wait_does(tmp_path):
    runner = _runner(tmp_path, Brief())
    _, rec = runner.submit(_body())
    # held until the end (0.3 s), not for the whole 30 s asked: the wait_for fails if it held on
    rec = await asyncio.wait_for(runner.get(rec["test_id"], wait=30), 10)
    assert rec["status"] == "succeeded"
    assert (await runner.get(rec["test_id"], wait=30))["status"] == "succeeded"  # an ended test: at once
    hangs = _runner(tmp_path, Hangs())
    _, rec = hangs.submit(_body())
    rec = await hangs.get(rec["test_id"], wait=0.2)
    assert rec["status"] == "running" and hangs.running is not None  # the wait ended, the test goes on
    await hangs.cancel(rec["test_id"])
