"""`make bench-movers`, its authorization rows: XRootD HTTP-TPC (https) with bearer tokens vs with the agents' X509
host certificates vs with no authentication at all, each driven by the agent and sent by hand with curl (the paper's
way), side by side in one run.

Two pairs of real agents (tests/support/agents.py): one pair in token mode, trusting the operator's real issuer
(running in this process over HTTPS), one pair as agents run without tokens (the destination's local XRootD TPC
instance admits the agent's host certificate; the source serves the sets to anyone, `Credential: none`). The none
rows: a pair of plain XRootD instances the bench starts itself (tests/support/anonymous_xrootd.py), HTTPS with host
certificates of the same CA, no authentication on either side (the source serves the x509 source's files to anyone,
the landing lets anyone write), so only the by-hand COPY reaches them: their agent-driven column is "–" because an
agent never runs an anonymous landing (its local TPC instance always checks its certificate or a token). For each
case (1 and 8 streams, 1 and 11 files at once) five interleaved measurements: the agent-driven copy through the
destination's API and the same COPYs sent by hand with curl straight to the destination's local XRootD instance, in
each agent mode, then the by-hand COPYs of the none pair. Gbit/s = bytes / (last file's end - start): the agent's
record ends at the last byte in, curl at the COPY's final line. By hand / none's by hand: what validating a token or a
certificate costs the same COPY. Received files are not checksummed (the agent's rows turn verification off; curl
checks nothing).
"""

from __future__ import annotations

import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START, END = "<!-- bench-movers-auth:start -->", "<!-- bench-movers-auth:end -->"
MODES = ("token", "x509", "none")  # the order of each case's measurements
AGENT_MODES = ("token", "x509")  # none: no agent runs an anonymous landing
DRIVERS = ("agent", "curl")
TOKEN_LIFETIME = 1800  # seconds: one case's tokens outlive its slowest copy


@dataclass
class AuthCase:
    streams: int
    concurrency: int
    samples: dict[tuple[str, str], list[float | None]] = field(default_factory=dict)
    refused: str | None = None

    def gbps(self, mode: str, driver: str) -> float | None:
        ok = [s for s in self.samples.get((mode, driver), []) if s is not None]
        return statistics.median(ok) if ok else None

    def spread(self, mode: str, driver: str) -> str:
        ok = [s for s in self.samples.get((mode, driver), []) if s is not None]
        return f"{min(ok):.2f}-{max(ok):.2f}" if len(ok) > 1 else "–"


@dataclass(frozen=True)
class Route:
    """Where the by-hand COPYs of one mode go."""

    source: str  # the set's URL on the source
    landing: str  # the URL of /incoming on the landing
    incoming: Path  # the landing's /incoming on disk
    ca_file: Path
    curl_auth: tuple[str, ...] = ()  # what curl presents besides tokens (x509: the destination's host certificate)


def agent_route(src: Any, dst: Any, size: int, tokens: bool) -> Route:
    """To the destination agent's local XRootD instance, as its agent sends them (without tokens: with its host
    certificate, from its address)."""
    auth = () if tokens else ("--cert", str(dst.cert_file), "--key", str(dst.key_file), "--interface", dst.address)
    return Route(f"https://{src.address}:{src.ports['xrootd_https_port']}/sets/11x{size}",
                 f"https://{dst.address}:{_tpc_port(dst)}/incoming", dst.data_dir / "data" / "incoming",
                 dst.ca_file, auth)


def anonymous_route(pair: Any, size: int) -> Route:
    """To the none pair's landing (tests.support.anonymous_xrootd.AnonymousPair): nothing presented."""
    return Route(f"{pair.source.url}/sets/11x{size}", f"{pair.landing.url}/incoming", pair.incoming, pair.ca_file)


def _tpc_port(agent: Any) -> int:
    return agent.get("/api/v1/info").json()["servers"]["xrootd-https-tpc"]["port"]


def _audience(agent: Any) -> str:
    return f"https://{agent.address}:{agent.ports['xrootd_https_port']}"


class AuthBench:
    def __init__(self, size: int, repeats: int, log: Callable[[str], None], api: Callable[..., Any]) -> None:
        """``api(src, dst, protocol, port, files, streams, conc, dest, tokens=...)``: the main bench's agent-driven
        test (Gbit/s, None when it failed, or the agent's reason when it refused)."""
        self.size, self.repeats, self.log, self.api = size, repeats, log, api
        self.cases: dict[tuple[int, int], AuthCase] = {}

    def tokens(self, issuer: Any, src: Any, dst: Any) -> dict[str, str]:
        from tpcmesh_operator.credentials.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest

        return {"read": issuer.issue(TokenRequest(dst.name, _audience(src), (READ_SETS,), TOKEN_LIFETIME)),
                "create": issuer.issue(TokenRequest(dst.name, _audience(dst), (CREATE_INCOMING,), TOKEN_LIFETIME))}

    def by_hand(self, route: Route, files: list[dict], streams: int, conc: int,
                tokens: dict[str, str] | None) -> float | None:
        """The COPYs curl sends straight to the landing XRootD instance, one curl per file, all at once (tokens:
        Authorization and TransferHeaderAuthorization; besides, what the route presents). Headers go through a file
        of this process only, not the command line, where any local user could read a token."""
        landing = route.incoming / f"by-hand-{uuid.uuid4()}"
        landing.mkdir()
        nobody = pwd.getpwnam("nobody")
        os.chown(landing, nobody.pw_uid, nobody.pw_gid)  # XRootD runs as the agents' run_user
        headers = Path(tempfile.mkstemp(prefix="bench-copy-headers-")[1])
        try:
            lines = ["Credential: none", f"X-Number-Of-Streams: {streams}", "Overwrite: T"]
            if tokens:
                lines += [f"Authorization: Bearer {tokens['create']}",
                          f"TransferHeaderAuthorization: Bearer {tokens['read']}"]
            headers.write_text("\n".join(lines) + "\n")
            t0 = time.monotonic()
            procs = [subprocess.Popen(["curl", "-sS", "--noproxy", "*", "-X", "COPY", "--cacert", str(route.ca_file),
                                       "-H", f"@{headers}", "-H", f"Source: {route.source}/{f['name']}",
                                       *route.curl_auth, f"{route.landing}/{landing.name}/{f['name']}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for f in files[:conc]]
            outs = [p.communicate(timeout=900) for p in procs]
            dt = time.monotonic() - t0
        finally:
            headers.unlink(missing_ok=True)
            shutil.rmtree(landing, ignore_errors=True)
        failed = [o for o in outs if not o[0].decode(errors="replace").rstrip().endswith("success: Created")]
        if failed:
            self.log(f"    by hand failed: {(failed[0][0] + failed[0][1]).decode(errors='replace')[-300:]}")
            return None
        return sum(f["size"] for f in files[:conc]) * 8 / 1e9 / dt

    def run(self, pairs: dict[str, tuple[Any, Any]], issuer: Any, files: dict[str, list[dict]],
            anonymous: Any) -> None:
        """``pairs``: agent mode -> (source, destination) agents; ``anonymous``: the none pair
        (tests.support.anonymous_xrootd.AnonymousPair); ``files``: mode -> the source's set."""
        routes = {mode: agent_route(*pairs[mode], self.size, mode == "token") for mode in AGENT_MODES}
        routes["none"] = anonymous_route(anonymous, self.size)
        # untimed: XRootD's token plugin fetches the issuer's keys with the first token it sees, and the first write
        # into memory the VM has not touched is slower; neither is the per-copy cost these rows are about
        self.log("authorization rows: warming up (untimed: one copy each way in each mode)")
        for mode in MODES:
            tokens = self.tokens(issuer, *pairs[mode]) if mode == "token" else None
            if mode in AGENT_MODES:
                src, dst = pairs[mode]
                self.api(src, dst, "xrootd-https", src.ports["xrootd_https_port"], files[mode], 1, 11, "store",
                         tokens=tokens)
            self.by_hand(routes[mode], files[mode], 1, 11, tokens)
        for rep in range(self.repeats):
            self.log(f"authorization rows, repeat {rep + 1}/{self.repeats}")
            for conc in (1, 11):
                for streams in (1, 8):
                    case = self.cases.setdefault((streams, conc), AuthCase(streams, conc))
                    for mode in MODES:
                        tokens = self.tokens(issuer, *pairs[mode]) if mode == "token" else None
                        agent: float | str | None = "–"
                        if mode in AGENT_MODES:
                            src, dst = pairs[mode]
                            agent = self.api(src, dst, "xrootd-https", src.ports["xrootd_https_port"], files[mode],
                                             streams, conc, "store", tokens=tokens)
                            if isinstance(agent, str):  # the agent refused the case (memory): curl would not fit
                                case.refused = agent
                                break
                            case.samples.setdefault((mode, "agent"), []).append(agent)
                        by_hand = self.by_hand(routes[mode], files[mode], streams, conc, tokens)
                        case.samples.setdefault((mode, "curl"), []).append(by_hand)
                        self.log(f"  {mode:5s} streams={streams} concurrency={conc:2d}: agent {_fmt(agent)}, "
                                 f"by hand {_fmt(by_hand)} Gbit/s")

    def section(self, header: str) -> str:
        rows = ["| XRootD HTTP-TPC (https) | streams | concurrency | Gbit/s agent-driven | Gbit/s by hand (curl) | "
                "agent / by hand | token / x509 (agent-driven) | by hand / none's by hand | spread agent; by hand |",
                "|---|---|---|---|---|---|---|---|---|"]
        refused = []
        for case in self.cases.values():
            if case.refused:
                rows.append(f"| token, x509 and none | {case.streams} | {case.concurrency} | refused¹ | – | – | – | "
                            "– | – |")
                refused.append(f"¹ {case.streams} stream(s) × {case.concurrency}: the agent refused the case: "
                               f"“{case.refused}”.")
                continue
            x509, none = case.gbps("x509", "agent"), case.gbps("none", "curl")
            for mode in MODES:
                agent, hand = case.gbps(mode, "agent"), case.gbps(mode, "curl")
                ratio = f"{agent / hand:.2f}" if agent and hand else "–"
                vs = f"{agent / x509:.2f}" if mode == "token" and agent and x509 else "–"
                vs_none = f"{hand / none:.2f}" if mode != "none" and hand and none else "–"
                shown = _fmt(agent) if mode in AGENT_MODES else "–"
                rows.append(f"| {mode} | {case.streams} | {case.concurrency} | {shown} | {_fmt(hand)} | "
                            f"{ratio} | {vs} | {vs_none} | {case.spread(mode, 'agent')}; {case.spread(mode, 'curl')} |")
        goal = [f"{m} {c.streams}×{c.concurrency}: {c.gbps(m, 'agent') / c.gbps(m, 'curl'):.2f}"  # type: ignore[operator]
                for c in self.cases.values() for m in AGENT_MODES if c.gbps(m, "agent") and c.gbps(m, "curl")]
        met = [g for g in goal if float(g.rsplit(": ", 1)[1]) >= 0.95]
        summary = (f"Goal agent-driven / by hand ≥ 0.95: met in {len(met)} of {len(goal)} cases ({'; '.join(goal)})."
                   if goal else "No case finished both ways: no agent / by hand ratio.")
        return "\n".join([START, "## XRootD HTTP-TPC by authorization: token vs x509 vs none, agent vs by hand "
                          "(`make bench-movers`)", "", header, "", *rows, "",
                          *[line for r in refused for line in (r, "")], summary, "", self.validation_cost(), END])

    def validation_cost(self) -> str:
        """What authorization costs the same COPY sent by hand: each mode's Gbit/s over none's, and the wall-clock
        time that adds to the case (its files at once)."""
        costs = []
        for c in self.cases.values():
            none = c.gbps("none", "curl")
            for mode in AGENT_MODES:
                hand = c.gbps(mode, "curl")
                if hand and none:
                    extra_ms = self.size * c.concurrency * 8 / 1e9 * (1 / hand - 1 / none) * 1000
                    costs.append(f"{mode} {c.streams}×{c.concurrency}: {hand / none:.2f} ({extra_ms:+.0f} ms)")
        if not costs:
            return "No case finished by hand both in none and in another mode: no cost of authorization."
        return ("Cost of authorization per case, by hand against none (Gbit/s ratio, and the wall-clock time it adds "
                "to the case's copies; a ratio above 1 or a negative time is noise larger than the cost): "
                + "; ".join(costs) + ".")


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else "failed" if v is None else str(v)
