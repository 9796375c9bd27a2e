"""``python -m tpcmesh_agent.twamp``: one loss probe outside the agent (the lab's tests and benchmarks, and a
site checking a path by hand): a reflector on ``--address`` and a sender to every ``--peer``; each summary is
printed as one JSON line; after ``--periods`` summaries per peer it prints its counters (one JSON line on stderr)
and exits."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections import Counter
from collections.abc import Sequence

from .sender import DEFAULT_PORT
from .service import ConfigError, LossProbe


def _peer(text: str) -> dict:
    name, _, rest = text.partition("=")
    if not rest:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=ADDRESS[,PORT]")
    address, _, port = rest.partition(",")
    return {"name": name, "address": address, "port": int(port) if port else DEFAULT_PORT}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tpcmesh_agent.twamp", description=__doc__)
    p.add_argument("--address", action="append", required=True, help="local address (once per family)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the reflector's UDP port")
    p.add_argument("--node", default="")
    p.add_argument("--peer", action="append", type=_peer, default=[], help="NAME=ADDRESS[,PORT]: probe and allow")
    p.add_argument("--allow", action="append", type=_peer, default=[],
                   help="NAME=ADDRESS[,PORT]: probe and allow (an external reflector)")
    p.add_argument("--reflect", action="append", default=[], help="ADDRESS: answer, do not probe")
    p.add_argument("--rate", type=float, default=10.0, help="packets per second to each peer")
    p.add_argument("--padding", type=int, default=27)
    p.add_argument("--dscp", type=int, default=0)
    p.add_argument("--period", type=float, default=60.0, help="seconds per summary")
    p.add_argument("--loss-timeout", type=float, default=5.0)
    p.add_argument("--periods", type=int, default=0,
                   help="exit after this many whole periods' summaries per peer (0: never; the first, partial "
                        "period does not count)")
    return p


async def _main(args: argparse.Namespace) -> int:
    done = asyncio.Event()
    counts: Counter[str] = Counter()
    peers = len(args.peer) + len(args.allow)

    def emit(record: dict) -> None:
        print(json.dumps(record), flush=True)
        counts[record["peer"]] += not record["partial"]
        if args.periods and sum(1 for v in counts.values() if v >= args.periods) == peers:
            done.set()

    probe = LossProbe(args.address, port=args.port, node=args.node, on_summary=emit)
    try:
        probe.start()
        probe.configure({"peers": args.peer, "external_reflectors": args.allow,
                         "allowed_senders": args.reflect, "rate_pps": args.rate,
                         "padding": args.padding, "dscp": args.dscp, "period_s": args.period,
                         "loss_timeout_s": min(args.loss_timeout, args.period)})
    except (OSError, ConfigError) as e:
        print(f"twamp: {e}", file=sys.stderr)
        return 2
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    print("READY", file=sys.stderr, flush=True)
    await done.wait()
    await probe.stop()
    status = probe.status()
    print(json.dumps({"reflector": status["reflector"], "sender": status["sender"]}), file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(_main(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
