"""The agent process: control API (aiohttp, HTTPS, bearer token, optional mTLS), metrics, built-in data server
and the protocol-server supervisor."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import ipaddress
import json
import logging
import signal
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from . import __version__, congestion, hosttelemetry, versions
from .cadir import write_ca_dir
from .ceilings import MAX_CONCURRENCY, MAX_RUNTIME, MAX_SIZE, CeilingError, FioPlan, measure
from .config import ALL_PROTOCOLS, MIN_TOKEN_LENGTH, Settings
from .daemons.gridmap import GridftpAccess, MeshError
from .files import FileSetError, FileSets, spec_from_request, validate_name
from .metrics import CONTENT_TYPE, AgentMetrics
from .movers import load_movers
from .movers.base import url_host
from .probes import tcp_connect_rtt
from .runner import MAX_WAIT, ApiError, TransferRunner, _int
from .storage import STORAGES, disk_problem, space_problem
from .tracepath import trace_path
from .twamp.outbox import MAX_BATCH
from .twamp.service import ConfigError, LossProbe

log = logging.getLogger(__name__)
IO_THREADS = 8  # the agent's blocking work at once (file sets, host summaries, port checks, version probes)


async def start_io_threads(n: int) -> None:
    """The loop's default executor with all ``n`` workers started now: one started on demand (when two blocking
    calls overlap) stays idle for the agent's life, so its thread count would creep with load, and the tests count
    threads to find pulls that did not end."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="agent-io")
    loop.set_default_executor(pool)
    barrier = threading.Barrier(n, timeout=30)  # each worker waits until all n exist
    await asyncio.gather(*(loop.run_in_executor(pool, barrier.wait) for _ in range(n)))


def _when(value: str | None, name: str) -> float:
    """A query's time as Unix seconds: RFC 3339 (2026-11-28T01:02:03.5Z) or a number; 422 naming ``name``."""
    if not value:
        raise ApiError(422, f"{name} is required: an RFC 3339 time or Unix seconds")
    try:
        return float(value)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(value)
    except ValueError as e:
        raise ApiError(422, f"{name} {value!r} is neither an RFC 3339 time nor Unix seconds") from e
    if t.tzinfo is None:
        raise ApiError(422, f"{name} {value!r} has no UTC offset (write Z or +00:00)")
    return t.timestamp()


class TokenSource:
    """The bearer token, re-read when the file changes (rotation without restart). A new token must be as long as
    one at start-up (MIN_TOKEN_LENGTH); one that is not, or a file that cannot be read, keeps the last token and is
    logged once (not on every request)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: float | None = None  # mtime of the file content last looked at
        self._token = ""
        self._problem: str | None = None
        self()  # the token the settings were validated with, whatever the file says by the first request

    def __call__(self) -> str:
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._seen:
                tok = self.path.read_text().strip()
                self._seen = mtime
                if len(tok) < MIN_TOKEN_LENGTH:
                    self._warn(f"Token file {self.path} holds a token shorter than {MIN_TOKEN_LENGTH} characters; "
                               "keeping the last token")
                else:
                    if self._token and tok != self._token:
                        log.info("Rotated the API token from %s", self.path)
                    self._token, self._problem = tok, None
        except OSError as e:
            self._warn(f"Token file {self.path} could not be read ({e.strerror or e}); keeping the last token")
        return self._token

    def _warn(self, message: str) -> None:
        if message != self._problem:
            log.warning("%s", message)
            self._problem = message

    def check(self, header: str) -> bool:
        want = self()
        if not want or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), want.encode())


def _load_supervisor(settings: Settings) -> Any | None:
    try:
        mod = importlib.import_module("tpcmesh_agent.daemons")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("tpcmesh_agent.daemons"):
            return None
        raise
    return mod.ServerSupervisor(settings)


def _protocol_server_status(protocol: str, servers: dict[str, dict]) -> dict:
    """The status of the server(s) behind a protocol: xrootd-https has a public and a local TPC instance
    (``xrootd-https-tpc``) and works only while both do; its port is the public one."""
    parts = [st for name, st in servers.items() if name == protocol or name.startswith(protocol + "-")]
    if not parts:
        return servers.get(protocol.split("-")[0]) or {}
    public = servers.get(protocol, parts[0])
    return {
        "available": all(st.get("available", True) for st in parts),
        "running": all(st.get("running", False) for st in parts),
        "port": public.get("port"),
        "message": next((st["message"] for st in parts if st.get("message")), None),
        "restarts": sum(int(st.get("restarts", 0)) for st in parts),
    }


class Agent:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.token = TokenSource(settings.token_file)  # type: ignore[arg-type]
        self.supervisor: Any | None = None
        self.supervisor_error: str | None = None
        self.data_server: Any | None = None
        self.data_server6: Any | None = None  # dual stack: the built-in data server on address6
        self.movers, self.problems = load_movers(settings)
        self.filesets = FileSets(settings.sets_dir, settings.budget_bytes)
        # disk mode: the sets on the disk path, bounded by its free space less the reserve, always left cold
        self.disk_filesets = (FileSets(settings.disk_dir / "sets", 2**63, settings.disk_reserve_bytes, cold=True)
                              if settings.disk_dir is not None else None)
        self._ceilings_lock = asyncio.Lock()
        self.gridftp_access = GridftpAccess(settings)  # the mesh's members GridFTP admits
        self.metrics = AgentMetrics(self.servers_status, lambda: self.loss)
        self.host = hosttelemetry.Sampler(settings.host_sample_interval, settings.addresses,
                                          [settings.port_of(p) or 0 for p in settings.protocols if p != "gridftp"],
                                          cpu_shared=settings.host_cpu_shared, cgroup_root=settings.cgroup_root)
        self.runner = TransferRunner(settings, self.movers, self.problems, self.filesets, self.metrics, self.host)
        self.loss: LossProbe | None = None
        self.loss_error: str | None = None
        self.ready = False
        self._set_locks: dict[str, asyncio.Lock] = {}
        self._ssl_ctx: ssl.SSLContext | None = None
        self._cert_mtime: tuple[float, float] | None = None

    # ---- status --------------------------------------------------------------------------------------------
    def servers_status(self) -> dict[str, dict]:
        status: dict[str, dict] = {}
        if "builtin" in self.settings.protocols:
            status["builtin"] = {"available": True, "running": self.data_server is not None,
                                 "port": self.settings.builtin_port, "message": None, "restarts": 0}
        if self.supervisor is not None:
            try:
                status.update(self.supervisor.status())
            except Exception as e:  # status must never break /info or /metrics
                log.warning("Supervisor status failed: %s", e)
        elif self.supervisor_error:
            for name in ("xrootd-https", "xrootd-root", "gridftp", "iperf3"):
                if name in self.settings.protocols:
                    status[name] = {"available": False, "running": False, "port": self.settings.port_of(name),
                                    "message": self.supervisor_error, "restarts": 0}
        return status

    def protocols_info(self) -> dict[str, dict]:
        servers = self.servers_status()
        out = {}
        for p in ALL_PROTOCOLS:
            mover = self.movers.get(p)
            why = self.problems.get(p)
            if mover is not None and why is None:
                try:
                    why = mover.available()
                except Exception as e:
                    why = f"availability check failed: {e}"
            st = _protocol_server_status(p, servers)
            message = why or st.get("message")
            available = why is None and st.get("available", mover is not None)
            out[p] = {
                "available": bool(available),
                "running": bool(st.get("running", False)),
                "port": st.get("port", self.settings.port_of(p)),
                "message": message if not available else st.get("message"),
                "restarts": int(st.get("restarts", 0)),
            }
        return out

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        await start_io_threads(IO_THREADS)
        s.sets_dir.mkdir(parents=True, exist_ok=True)
        if s.incoming_dir.exists():
            await asyncio.to_thread(__import__("shutil").rmtree, s.incoming_dir, True)
        s.incoming_dir.mkdir(parents=True, exist_ok=True)
        if s.disk_dir is not None:
            why = disk_problem(s.node_name, s.disk_dir)
            if why:  # the agent runs without disk mode; disk requests get this reason
                log.warning("Disk mode is unavailable: %s", why)
            else:  # what an earlier run left in incoming/ is ours to remove; disk_dir itself is never created
                await asyncio.to_thread(__import__("shutil").rmtree, s.disk_dir / "incoming", True)
                (s.disk_dir / "sets").mkdir(exist_ok=True)
                (s.disk_dir / "incoming").mkdir(exist_ok=True)
        self.runner.versions = await asyncio.to_thread(versions.local_versions)
        log.info("Found the implementations' versions: %s", ", ".join(
            f"{name} {version or 'unknown'}" for name, version in self.runner.versions.items()))
        if s.ca_file is not None and s.ca_dir is not None:
            write_ca_dir(s.ca_file, s.ca_dir)
        await asyncio.to_thread(self.host.start)  # its first sample before the agent is ready
        if "builtin" in s.protocols and "builtin" in self.movers:
            from .movers.builtin import DataServer

            self.data_server = DataServer(s, self.token)
            self.data_server.start()
            if s.address6:  # dual stack: a second listener, over IPv6
                self.data_server6 = DataServer(s, self.token, s.address6)
                self.data_server6.start()
        try:
            self.supervisor = _load_supervisor(s)
            if self.supervisor is not None:
                await self.supervisor.start()
                self.runner.server_status = self.supervisor.status
        except Exception as e:  # the built-in mover and the API keep working without the protocol servers
            log.exception("Protocol-server supervisor failed to start")
            self.supervisor_error = f"protocol-server supervisor failed: {type(e).__name__}: {e}"
            self.supervisor = None
        if s.loss_port:
            probe = LossProbe(s.addresses, port=s.loss_port, node=s.node_name, capacity=s.loss_buffer_summaries)
            if kept := probe.outbox.load(s.loss_outbox_file):
                log.info("Loaded %d loss summaries saved by the last run from %s", kept, s.loss_outbox_file)
            try:
                probe.start()
                self.loss = probe
            except OSError:  # the transfers keep working without the loss probes; /api/v1/loss says why
                self.loss_error = probe.error
        self.ready = True

    def _cert_stamp(self) -> tuple[float, float] | None:
        s = self.settings
        try:
            return (s.tls_cert.stat().st_mtime, s.tls_key.stat().st_mtime)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            return None

    async def watch_certificate(self, interval: float = 30.0) -> None:
        """Reload the host certificate when its files change (renewed by the CSR sidecar); new connections use it."""
        while True:
            await asyncio.sleep(interval)
            stamp = self._cert_stamp()
            if self._ssl_ctx is None or stamp is None or stamp == self._cert_mtime:
                continue
            try:
                self._ssl_ctx.load_cert_chain(str(self.settings.tls_cert), str(self.settings.tls_key))
            except (OSError, ssl.SSLError) as e:
                log.warning("Host certificate %s changed but could not be loaded: %s", self.settings.tls_cert, e)
                continue
            self._cert_mtime = stamp
            log.info("Reloaded host certificate %s", self.settings.tls_cert)

    async def stop(self) -> None:
        self.ready = False
        if self.loss is not None:
            await self.loss.stop()
            try:
                self.loss.outbox.save(self.settings.loss_outbox_file)
            except OSError as e:
                log.warning("Could not save %d loss summaries to %s: %s", len(self.loss.outbox),
                            self.settings.loss_outbox_file, e.strerror or e)
            self.loss = None
        await self.runner.shutdown()
        await asyncio.to_thread(self.host.stop)
        if self.supervisor is not None:
            with contextlib.suppress(Exception):
                await self.supervisor.stop()
        if self.data_server is not None:
            await asyncio.to_thread(self.data_server.stop)
            self.data_server = None
        if self.data_server6 is not None:
            await asyncio.to_thread(self.data_server6.stop)
            self.data_server6 = None
        for mover in self.movers.values():
            try:
                mover.close()
            except Exception:  # one mover's clean-up must not stop the others'
                log.exception("Mover %s failed to clean up", mover.protocol)

    # ---- HTTP ----------------------------------------------------------------------------------------------
    @web.middleware
    async def auth_and_errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if request.path.startswith("/api/"):
                if self.settings.client_ca_file is not None:
                    ssl_obj = request.transport.get_extra_info("ssl_object") if request.transport else None
                    if ssl_obj is None or not ssl_obj.getpeercert():
                        raise ApiError(401, "a client certificate signed by the configured client CA is required")
                if not self.token.check(request.headers.get("Authorization", "")):
                    raise ApiError(401, "missing or wrong bearer token (Authorization: Bearer <token>)")
            return await handler(request)
        except ApiError as e:
            return web.json_response(e.body, status=e.status)

    async def _json(self, request: web.Request) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {e}") from e

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ready"})

    async def info(self, request: web.Request) -> web.Response:
        running = self.runner.running
        return web.json_response({
            "node": self.settings.node_name,
            "address": self.settings.address,
            "address6": self.settings.address6 or None,
            "version": __version__,
            "versions": self.runner.versions,
            "protocols": self.protocols_info(),
            "congestion_control": congestion.kernel_algorithms(),
            "servers": self.servers_status(),
            "budget_bytes": self.settings.budget_bytes,
            "file_sets": self.filesets.list(),
            "disk": self.disk_info(),
            "mesh": self.gridftp_access.members(),
            "running_test_id": running.job.test_id if running else None,
        })

    def disk_info(self) -> dict | None:
        """The disk path, whether it can be used (or why not) and its disk sets; None without one."""
        disk_dir = self.settings.disk_dir
        if disk_dir is None or self.disk_filesets is None:
            return None
        why = disk_problem(self.settings.node_name, disk_dir)
        return {"path": str(disk_dir), "available": why is None, "message": why,
                "reserve_bytes": self.settings.disk_reserve_bytes,
                "file_sets": self.disk_filesets.list() if why is None else []}

    def _filesets_of(self, storage: object) -> FileSets:
        """The sets of ``storage`` (memory or disk); 422 naming the node and path when disk cannot be used."""
        if storage not in STORAGES:
            raise ApiError(422, f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
        if storage == "memory":
            return self.filesets
        why = disk_problem(self.settings.node_name, self.settings.disk_dir)
        if why or self.disk_filesets is None:
            raise ApiError(422, why or f"node {self.settings.node_name} has no disk path")
        return self.disk_filesets

    async def post_fileset(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object: {count, size} or {dataset}")
        verify = body.pop("verify", False)
        mesh = body.pop("mesh", None)
        storage = body.pop("storage", "memory")
        filesets = self._filesets_of(storage)
        try:
            spec = spec_from_request(body)
            if mesh is not None:  # the run's agents: who may read the set over GridFTP (daemons/gridmap.py)
                await asyncio.to_thread(self.gridftp_access.set_members, mesh)
        except (FileSetError, MeshError) as e:
            raise ApiError(422, str(e)) from e
        lock = self._set_locks.setdefault(f"{storage}/{spec.name}", asyncio.Lock())
        async with lock:
            try:
                entries = await asyncio.to_thread(filesets.ensure, spec, bool(verify))
            except FileSetError as e:
                raise ApiError(422, str(e)) from e
            except OSError as e:
                raise ApiError(507, f"writing file set {spec.name} failed: {e.strerror or e}") from e
        return web.json_response({"name": spec.name, "total_bytes": spec.total_bytes, "storage": storage,
                                  "files": [e.as_dict() for e in entries]})

    async def list_filesets(self, request: web.Request) -> web.Response:
        storage = request.query.get("storage", "memory")
        return web.json_response({"file_sets": self._filesets_of(storage).list()})

    async def delete_fileset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            validate_name(name, "set name")
        except FileSetError as e:
            raise ApiError(422, str(e)) from e
        storage = request.query.get("storage", "memory")
        if not await asyncio.to_thread(self._filesets_of(storage).remove, name):
            raise ApiError(404, f"no {storage} file set {name} on this agent")
        return web.json_response({"deleted": name})

    async def post_transfer(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        code, record = self.runner.submit(body)
        return web.json_response(record, status=code)

    async def get_transfer(self, request: web.Request) -> web.Response:
        """The record; ``?wait=S`` (seconds, up to MAX_WAIT) holds the answer until the test ends or S pass, so a
        caller learns of the end at once without polling faster."""
        raw = request.query.get("wait", "0")
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_WAIT:  # also NaN
            raise ApiError(422, f"wait must be a number of seconds from 0 to {MAX_WAIT:g}, got {raw!r}")
        return web.json_response(await self.runner.get(request.match_info["id"], wait))

    async def delete_transfer(self, request: web.Request) -> web.Response:
        return web.json_response(await self.runner.cancel(request.match_info["id"]))

    async def storage_ceilings(self, request: web.Request) -> web.Response:
        """The disk path's local write and read rates (ceilings.py: fio, sequential 1 MiB, O_DIRECT) at
        ``concurrency`` jobs of ``size`` bytes each; 409 while a transfer or another measurement runs."""
        body = await self._json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object {concurrency, size, runtime_seconds}")
        disk_dir = self.settings.disk_dir
        self._filesets_of("disk")  # refuses a missing, unwritable or memory-backed path
        assert disk_dir is not None
        concurrency = _int(body, "concurrency", 1, 1, MAX_CONCURRENCY)
        size = _int(body, "size", 64 * 2**20, 2**20, MAX_SIZE)
        runtime = _int(body, "runtime_seconds", 60, 1, MAX_RUNTIME)
        short = space_problem(self.settings.node_name, disk_dir, concurrency * size, self.settings.disk_reserve_bytes)
        if short:
            raise ApiError(422, short)
        if self.runner.running is not None or self._ceilings_lock.locked():
            raise ApiError(409, "a transfer or a storage measurement is running; measure the ceilings alone")
        async with self._ceilings_lock:
            try:
                result = await asyncio.to_thread(measure, FioPlan(disk_dir / "fio", concurrency, size, runtime))
            except CeilingError as e:
                raise ApiError(503, f"node {self.settings.node_name}: measuring {disk_dir} failed: {e}") from e
        log.info("Measured the storage ceilings of %s: write %.0f MB/s, read %.0f MB/s (concurrency %d)", disk_dir,
                 result["write_bps"] / 1e6, result["read_bps"] / 1e6, concurrency)
        return web.json_response({"node": self.settings.node_name, "path": str(disk_dir), **result})

    async def rtt(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object {host, port, count}")
        host, port, count = body.get("host"), body.get("port", self.settings.api_port), body.get("count", 5)
        if not isinstance(host, str) or not host:
            raise ApiError(422, "host must be a host name or IP address")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ApiError(422, f"port must be an integer 1-65535, got {port!r}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise ApiError(422, f"count must be an integer 1-100, got {count!r}")
        return web.json_response(await tcp_connect_rtt(host, port, count))

    async def path(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object {host, max_hops}")
        host, max_hops = body.get("host"), body.get("max_hops", 30)
        if not isinstance(host, str) or not host or host.startswith("-") or any(c.isspace() for c in host):
            raise ApiError(422, f"host must be a host name or IP address, got {host!r}")
        if isinstance(max_hops, bool) or not isinstance(max_hops, int) or not 1 <= max_hops <= 64:
            raise ApiError(422, f"max_hops must be an integer 1-64, got {max_hops!r}")
        return web.json_response(await trace_path(host, max_hops))

    def _loss_probe(self) -> LossProbe:
        if self.loss is None:
            raise ApiError(503, self.loss_error or "the loss probes are off (loss_port 0)")
        return self.loss

    async def loss_status(self, request: web.Request) -> web.Response:
        if self.loss is None:
            return web.json_response({"running": False, "error": self.loss_error or "off (loss_port 0)"})
        return web.json_response({"running": True, **self.loss.status()})

    async def loss_config(self, request: web.Request) -> web.Response:
        probe = self._loss_probe()
        try:
            return web.json_response(probe.configure(await self._json(request)))
        except ConfigError as e:
            raise ApiError(422, str(e)) from e

    async def loss_summaries(self, request: web.Request) -> web.Response:
        """The oldest unacknowledged summaries (``?limit=``, 1..1000, default 500), oldest first."""
        box = self._loss_probe().outbox
        raw = request.query.get("limit", "500")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_BATCH:
            raise ApiError(422, f"limit must be an integer 1-{MAX_BATCH}, got {raw!r}")
        return web.json_response({"summaries": box.batch(int(raw)), **box.status()})

    async def loss_ack(self, request: web.Request) -> web.Response:
        """``{"through": id}``: the collector stored every summary up to that id; they are forgotten."""
        box = self._loss_probe().outbox
        body = await self._json(request)
        through = body.get("through") if isinstance(body, dict) else None
        if isinstance(through, bool) or not isinstance(through, int) or through < 0:
            raise ApiError(422, f"through must be a summary id (an integer >= 0), got {through!r}")
        return web.json_response({"acknowledged": box.ack(through), **box.status()})

    async def host_summary(self, request: web.Request) -> web.Response:
        """This end's host telemetry over a window (hosttelemetry.py): ``since`` and ``until`` as RFC 3339 times or
        Unix seconds, ``peer`` the other end's address (its route names the interface). 404 when the agent keeps
        no telemetry (host_sample_interval 0) or none of that time."""
        q = request.query
        since, until = _when(q.get("since"), "since"), _when(q.get("until"), "until")
        if until < since:
            raise ApiError(422, f"until ({q.get('until')}) is before since ({q.get('since')})")
        peer = q.get("peer") or None
        if peer is not None:
            try:
                ipaddress.ip_address(peer)
            except ValueError as e:
                raise ApiError(422, f"peer must be an IP address, got {peer!r}") from e
        summary = await asyncio.to_thread(self.host.summary, since, until, peer)
        if summary is None:
            why = ("host telemetry is off on this agent (host_sample_interval 0)" if self.settings.host_sample_interval
                   <= 0 else f"no host samples from {q.get('since')} to {q.get('until')} on this agent (it keeps "
                   f"the last {hosttelemetry.RING} samples)")
            raise ApiError(404, why)
        return web.json_response(summary)

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    def api_app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth_and_errors], client_max_size=4 * 2**20)
        app.add_routes([
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/api/v1/info", self.info),
            web.post("/api/v1/filesets", self.post_fileset),
            web.get("/api/v1/filesets", self.list_filesets),
            web.delete("/api/v1/filesets/{name}", self.delete_fileset),
            web.post("/api/v1/transfers", self.post_transfer),
            web.get("/api/v1/transfers/{id}", self.get_transfer),
            web.delete("/api/v1/transfers/{id}", self.delete_transfer),
            web.post("/api/v1/storage/ceilings", self.storage_ceilings),
            web.post("/api/v1/probes/rtt", self.rtt),
            web.post("/api/v1/probes/path", self.path),
            web.get("/api/v1/loss", self.loss_status),
            web.put("/api/v1/loss/config", self.loss_config),
            web.get("/api/v1/loss/summaries", self.loss_summaries),
            web.post("/api/v1/loss/summaries/ack", self.loss_ack),
            web.get("/api/v1/host", self.host_summary),
        ])
        return app

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/metrics", self.metrics_handler), web.get("/healthz", self.healthz)])
        return app

    def api_ssl(self) -> ssl.SSLContext | None:
        s = self.settings
        if s.tls_cert is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(s.tls_cert), str(s.tls_key))
        self._ssl_ctx = ctx
        self._cert_mtime = self._cert_stamp()
        if s.client_ca_file is not None:
            ctx.load_verify_locations(cafile=str(s.client_ca_file))
            ctx.verify_mode = ssl.CERT_OPTIONAL  # health probes need no certificate; /api/ checks it
        return ctx


async def serve(settings: Settings) -> None:
    agent = Agent(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = web.AppRunner(agent.api_app(), access_log=None, handle_signals=False)
    met = web.AppRunner(agent.metrics_app(), access_log=None, handle_signals=False)
    await api.setup()
    await met.setup()
    try:
        for address in settings.addresses:
            await web.TCPSite(api, address, settings.api_port, ssl_context=agent.api_ssl()).start()
            await web.TCPSite(met, address, settings.metrics_port).start()
            log.info("Started control API on https://%s:%d and metrics on http://%s:%d/metrics", url_host(address),
                     settings.api_port, url_host(address), settings.metrics_port)
        await agent.start()
        watcher = asyncio.create_task(agent.watch_certificate(settings.cert_reload_interval))
        log.info("Agent %s is ready (protocols: %s)", settings.node_name,
                 ", ".join(p for p, v in agent.protocols_info().items() if v["available"]) or "none")
        await stop.wait()
        watcher.cancel()
        log.info("Stopping agent %s", settings.node_name)
    finally:
        await agent.stop()
        await api.cleanup()
        await met.cleanup()
