"""`make bench-movers`, its authorization rows: XRootD HTTP-TPC (https) with bearer tokens vs with the agents' X509
host certificates, each driven by the agent and sent by hand with curl (the paper's way), side by side in one run.

Two pairs of real agents (tests/support/agents.py): one pair in token mode, trusting the operator's real issuer
(running in this process over HTTPS), one pair as agents run without tokens (the destination's local XRootD TPC
instance admits the agent's host certificate; the source serves the sets to anyone, `Credential: none`). For each
case (1 and 8 streams, 1 and 11 files at once) four interleaved measurements: the agent-driven copy through the
destination's API and the same COPYs sent by hand with curl straight to the destination's local XRootD instance, in
each mode. Gbit/s = bytes / (last file's end - start): the agent's record ends at the last byte in, curl at the
COPY's final line. Received files are not checksummed (the agent's rows turn verification off; curl checks
nothing).
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
MODES = ("token", "x509")
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
        from tpcmesh_operator.tokens.claims import CREATE_INCOMING, READ_SETS, TokenRequest

        return {"read": issuer.issue(TokenRequest(dst.name, _audience(src), (READ_SETS,), TOKEN_LIFETIME)),
                "create": issuer.issue(TokenRequest(dst.name, _audience(dst), (CREATE_INCOMING,), TOKEN_LIFETIME))}

    def by_hand(self, src: Any, dst: Any, files: list[dict], streams: int, conc: int,
                tokens: dict[str, str] | None) -> float | None:
        """The COPYs curl sends straight to the destination's local XRootD instance, one curl per file, all at
        once (tokens: Authorization and TransferHeaderAuthorization; else the destination's host certificate,
        from its address, as its agent does). Headers go through a file of this process only, not the command
        line, where any local user could read a token."""
        landing = dst.data_dir / "data" / "incoming" / f"by-hand-{uuid.uuid4()}"
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
            auth = [] if tokens else ["--cert", str(dst.cert_file), "--key", str(dst.key_file),
                                      "--interface", dst.address]
            base = f"https://{dst.address}:{_tpc_port(dst)}/incoming/{landing.name}"
            source = f"https://{src.address}:{src.ports['xrootd_https_port']}/sets/11x{self.size}"
            t0 = time.monotonic()
            procs = [subprocess.Popen(["curl", "-sS", "--noproxy", "*", "-X", "COPY", "--cacert", str(dst.ca_file),
                                       "-H", f"@{headers}", "-H", f"Source: {source}/{f['name']}", *auth,
                                       f"{base}/{f['name']}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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

    def run(self, pairs: dict[str, tuple[Any, Any]], issuer: Any, files: dict[str, list[dict]]) -> None:
        """``pairs``: mode -> (source, destination) agents; ``files``: mode -> the source's set."""
        # untimed: XRootD's token plugin fetches the issuer's keys with the first token it sees, and the first write
        # into memory the VM has not touched is slower; neither is the per-copy cost these rows are about
        self.log("authorization rows: warming up (untimed: one copy each way in each mode)")
        for mode in MODES:
            src, dst = pairs[mode]
            tokens = self.tokens(issuer, src, dst) if mode == "token" else None
            self.api(src, dst, "xrootd-https", src.ports["xrootd_https_port"], files[mode], 1, 11, "store",
                     tokens=tokens)
            self.by_hand(src, dst, files[mode], 1, 11, tokens)
        for rep in range(self.repeats):
            self.log(f"authorization rows, repeat {rep + 1}/{self.repeats}")
            for conc in (1, 11):
                for streams in (1, 8):
                    case = self.cases.setdefault((streams, conc), AuthCase(streams, conc))
                    for mode in MODES:
                        src, dst = pairs[mode]
                        tokens = self.tokens(issuer, src, dst) if mode == "token" else None
                        agent = self.api(src, dst, "xrootd-https", src.ports["xrootd_https_port"], files[mode],
                                         streams, conc, "store", tokens=tokens)
                        if isinstance(agent, str):  # the agent refused the case (memory): curl would not fit either
                            case.refused = agent
                            break
                        case.samples.setdefault((mode, "agent"), []).append(agent)
                        by_hand = self.by_hand(src, dst, files[mode], streams, conc, tokens)
                        case.samples.setdefault((mode, "curl"), []).append(by_hand)
                        self.log(f"  {mode:5s} streams={streams} concurrency={conc:2d}: agent {_fmt(agent)}, "
                                 f"by hand {_fmt(by_hand)} Gbit/s")

    def section(self, header: str) -> str:
        rows = ["| XRootD HTTP-TPC (https) | streams | concurrency | Gbit/s agent-driven | Gbit/s by hand (curl) | "
                "agent / by hand | token / x509 (agent-driven) | spread agent; by hand |",
                "|---|---|---|---|---|---|---|---|"]
        refused = []
        for case in self.cases.values():
            if case.refused:
                rows.append(f"| token and x509 | {case.streams} | {case.concurrency} | refused¹ | – | – | – | – |")
                refused.append(f"¹ {case.streams} stream(s) × {case.concurrency}: the agent refused the case: "
                               f"“{case.refused}”.")
                continue
            x509 = case.gbps("x509", "agent")
            for mode in MODES:
                agent, hand = case.gbps(mode, "agent"), case.gbps(mode, "curl")
                ratio = f"{agent / hand:.2f}" if agent and hand else "–"
                vs = f"{agent / x509:.2f}" if mode == "token" and agent and x509 else "–"
                rows.append(f"| {mode} | {case.streams} | {case.concurrency} | {_fmt(agent)} | {_fmt(hand)} | "
                            f"{ratio} | {vs} | {case.spread(mode, 'agent')}; {case.spread(mode, 'curl')} |")
        goal = [f"{m} {c.streams}×{c.concurrency}: {c.gbps(m, 'agent') / c.gbps(m, 'curl'):.2f}"  # type: ignore[operator]
                for c in self.cases.values() for m in MODES if c.gbps(m, "agent") and c.gbps(m, "curl")]
        met = [g for g in goal if float(g.rsplit(": ", 1)[1]) >= 0.95]
        summary = (f"Goal agent-driven / by hand ≥ 0.95: met in {len(met)} of {len(goal)} cases ({'; '.join(goal)})."
                   if goal else "No case finished both ways: no agent / by hand ratio.")
        return "\n".join([START, "## XRootD HTTP-TPC by authorization: token vs x509, agent vs by hand "
                          "(`make bench-movers`)", "", header, "", *rows, "",
                          *[line for r in refused for line in (r, "")], summary, END])


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else "failed" if v is None else str(v)
