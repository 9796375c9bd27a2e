"""The external endpoints' part of a run: each endpoint's credentials read, the file set uploaded once to a source
endpoint (checked before and after), and each test between an agent and an endpoint run through the agent
(``copies.py`` says who is asked what); the copies pushed into a gsiftp:// endpoint removed by the operator, which
can delete there when the agent cannot. The executor books what comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..credentials.tokens.minting import Minter
from ..plan.planner import Plan, Setting, Test
from ..plan.spec import BenchmarkSpec
from ..run.agents import Agent
from ..run.book import RunBook
from ..run.measurements import measurement_from_record
from ..run.status import test_id
from ..run.transfers import Transfers
from .access import Access, CredentialSource, ExternalError, access, endpoint_client, missing_files, verify_upload
from .copies import bench_dir, external_node, name_endpoint, pull_from_external, push_to_external, set_files
from .endpoints import ExternalEndpoint, PathEscapes

Record = Callable[[Test, dict[str, Any]], Awaitable[None]]  # books a test's measurement
RecordFailure = Callable[..., Awaitable[None]]  # (test, tid, error, started, rtt=None, status="failed")


class ExternalRunner:
    def __init__(self, book: RunBook, spec: BenchmarkSpec, transfers: Transfers, credentials: CredentialSource | None,
                 ca_file: str | None, token_issuer: Minter | None, auth: str) -> None:
        self.book = book
        self.spec = spec
        self.transfers = transfers
        self.credentials = credentials  # reads spec.externalEndpoints' Secrets
        self.ca_file = ca_file  # what the operator trusts reaching them (None: the system's)
        self.token_issuer = token_issuer
        self.auth = auth
        self._access: dict[str, Access | str] = {}  # endpoint -> how to reach it, or why it cannot be

    def nodes(self, plan: Plan | None) -> list[dict[str, Any]]:
        """The endpoints a run measured, as the ingest batch's nodes."""
        return [external_node(ep) for ep in self.spec.external_endpoints
                if plan is not None and ep.name in plan.externals]

    async def prepare(self, plan: Plan, frozen: Mapping[str, Agent], set_manifest: Mapping[str, Any] | None) -> None:
        """Each endpoint of the plan: its credentials read, and, for a source, the set uploaded once (the status
        remembers it: `externals`, endpoint -> "ready" or why not)."""
        book = self.book
        uploads = book.status.setdefault("externals", {})
        for ep in self.spec.external_endpoints:
            if ep.name not in plan.externals:
                continue
            try:
                acc = await access(ep, self.credentials)
            except ExternalError as e:
                self._access[ep.name] = str(e)
                book.event("Warning", "ExternalEndpointFailed", str(e))
                continue
            self._access[ep.name] = acc
            if ep.is_destination:
                try:
                    async with endpoint_client(acc, self.ca_file) as client:
                        await client.make_dirs(self._dir(ep, "incoming"))
                except ExternalError as e:
                    self._access[ep.name] = str(e)
                    book.event("Warning", "ExternalEndpointFailed", str(e))
                    if not ep.is_source:
                        continue
            if ep.is_source and uploads.get(ep.name) != "ready" and not book.stopping:
                uploads[ep.name] = await self._upload(acc, frozen, set_manifest)
                await book.save(force=True)

    async def run(self, test: Test, started: str, plan: Plan, current: Mapping[str, Agent], record: Record,
                  record_failure: RecordFailure) -> None:
        """A test between an agent and an endpoint, booked with `record` or `record_failure`."""
        book = self.book
        source_external = plan.is_external(test.source)
        ext, node = (test.source, test.destination) if source_external else (test.destination, test.source)
        tid0 = test_id(book.run.run_uid, test.key, 0)
        acc = self._access.get(ext)
        agent = current.get(node)
        uploaded = book.status.get("externals", {}).get(ext)
        if not isinstance(acc, Access):
            why = acc or f"external endpoint {ext}: not prepared"
        elif agent is None:
            why = f"agent {node} vanished (no longer Ready)"
        elif book.status["filesets"].get(node) != "ready":
            why = f"file set {self.spec.file_set.name} not ready on {node}: {book.status['filesets'].get(node)}"
        elif source_external and uploaded != "ready":
            why = name_endpoint(acc.describe(), "its test files are not there: "
                                                + str(uploaded).removeprefix(acc.describe() + ": "))
        else:
            why = ""
        if why:
            await record_failure(test, tid0, why, started)
            return
        assert isinstance(acc, Access) and agent is not None
        ep = acc.endpoint
        copy = pull_from_external if source_external else push_to_external
        directory = self._dir(ep, "sets" if source_external else "incoming")
        rec, error, tid = await self.transfers.attempts(test, agent, lambda tid: asyncio.to_thread(
            copy, self.spec, test, tid, acc, directory, agent, self.token_issuer, self.auth))
        if rec is None:
            await record_failure(test, tid, name_endpoint(acc.describe(), error), started, None,
                                 "cancelled" if book.stopping else "failed")
            return
        m = measurement_from_record(rec, test.source, test.destination, None)
        if ep.scheme == "gsiftp" and not source_external:  # the agent cannot delete over gsiftp: the operator does
            left = await self._remove_copies(acc, rec)
            if left and m.get("status") == "succeeded":
                m["status"] = "failed"
                m["error"] = "the copies were made but could not be removed: " + "; ".join(left)
        if m.get("error"):
            m["error"] = name_endpoint(acc.describe(), str(m["error"]))
        m["auth"] = self.auth
        await record(test, m)

    def _dir(self, ep: ExternalEndpoint, *parts: str) -> str:
        return str(ep.path_of(bench_dir(self.book.run.benchmark_namespace, self.book.run.benchmark_name), *parts))

    async def _upload(self, acc: Access, frozen: Mapping[str, Agent], set_manifest: Mapping[str, Any] | None) -> str:
        """The set into `<path>/<benchmark>/sets/<set>/` unless it is there already (sizes and adler32 checked
        before and after): a third-party copy from an agent that holds it. "ready", or why not (an Event too)."""
        book = self.book
        ep = acc.endpoint
        directory = self._dir(ep, "sets", self.spec.file_set.name)
        files = set_files(set_manifest)
        holder = next((a for n, a in frozen.items() if book.status["filesets"].get(n) == "ready"), None)
        try:
            if not files or holder is None:
                raise ExternalError(f"{acc.describe()}: no agent holds the file set {self.spec.file_set.name} to "
                                    "upload it from")
            async with endpoint_client(acc, self.ca_file) as client:
                if await missing_files(client, directory, files):
                    await client.make_dirs(directory)
                    tid = test_id(book.run.run_uid, f"upload/{ep.name}", 0)
                    request = await asyncio.to_thread(push_to_external, self.spec, None, tid, acc, directory, holder,
                                                      self.token_issuer, self.auth, streams=max(self.spec.streams),
                                                      remove=False)
                    upload = Test(-1, Setting(ep.protocol, 1), holder.node, ep.name)
                    record, error, _ = await self.transfers.transfer(upload, holder, request, tid)
                    if record is None or record.get("status") != "succeeded":
                        raise ExternalError(name_endpoint(acc.describe(), "uploading the test files from "
                                            f"{holder.node} failed: {(record or {}).get('error') or error}"))
                    await verify_upload(client, directory, files)
        except ExternalError as e:
            book.event("Warning", "ExternalUploadFailed", str(e))
            return str(e)
        book.event("Normal", "ExternalFilesReady", f"{acc.describe()}: the {len(files)} test files are at "
                                                   f"{directory} (sizes and adler32 checked)")
        return "ready"

    async def _remove_copies(self, acc: Access, record: Mapping[str, Any]) -> list[str]:
        """Remove what a push into a gsiftp endpoint left in its incoming directory (each file of the record); the
        problems."""
        problems: list[str] = []
        try:
            async with endpoint_client(acc, self.ca_file) as client:
                for f in record.get("files") or []:
                    try:
                        await client.delete(self._dir(acc.endpoint, "incoming", str(f["name"])))
                    except (ExternalError, PathEscapes) as e:
                        problems.append(str(e))
        except ExternalError as e:
            problems.append(str(e))
        return problems
