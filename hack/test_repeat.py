#!/usr/bin/env python3
"""Find flakes before CI does: run the test modules that start real protocol servers N times in a row, with busy
processes beside them (a loaded machine is where XRootD 5.5.3 crashed), and say after each round what failed, which
supervised server was restarted, and what the kernel logged (segfaults).

    make test-repeat                      # N=3 rounds, LOAD=2 busy processes, the default modules
    make test-repeat N=10 LOAD=4 MODULES="tests/integration/operator/test_operator_external.py"

Nothing is retried: a round that fails is reported (and, without --keep-going, ends the repetition) so the flake can
be fixed at its cause. The default modules are those under tests/integration/{agent,operator} that name xrootd or
gridftp, plus the supervision tests.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTEST = REPO / ".venv" / "bin" / "pytest"
SERVER_WORDS = re.compile(r"xrootd|gridftp")
KERNEL_CRASH = re.compile(r"segfault|general protection|traps:", re.IGNORECASE)
RESTARTED = "supervised servers restarted"


def default_modules() -> list[str]:
    found = [p for d in ("tests/integration/agent", "tests/integration/operator")
             for p in sorted((REPO / d).glob("test_*.py")) if SERVER_WORDS.search(p.read_text())]
    return [str(p.relative_to(REPO)) for p in found] + ["tests/integration/test_supervised_servers.py"]


def _busy() -> None:
    while True:
        pass


def kernel_log() -> list[str]:
    """The kernel ring buffer's lines (empty when it cannot be read, e.g. without root)."""
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else []


def run_round(modules: list[str], log: Path) -> tuple[int, str]:
    with open(log, "w") as out:
        code = subprocess.run([str(PYTEST), "-q", "-p", "no:cacheprovider", *modules], cwd=REPO, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    text = log.read_text(errors="replace")
    summary = [line for line in text.splitlines() if re.match(r"^(FAILED|ERROR) |^=* .*(passed|failed|error)", line)]
    if RESTARTED in text:
        block = text[text.index(RESTARTED):].split("\n=", 1)[0]
        summary += [f"{RESTARTED}:", *block.splitlines()[1:]]
    return code, "\n".join(summary)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--load", type=int, default=2, help="busy processes beside the tests (default 2: both cores here)")
    ap.add_argument("--keep-going", action="store_true", help="run every round even after a failed one")
    ap.add_argument("--logs", type=Path, default=REPO / "artifacts" / "test-repeat", help="one pytest log per round")
    ap.add_argument("modules", nargs="*", help="test modules (default: those that start real servers)")
    args = ap.parse_args()
    if args.times < 1 or args.load < 0:
        ap.error("--times must be at least 1 and --load at least 0")
    modules = args.modules or default_modules()
    args.logs.mkdir(parents=True, exist_ok=True)
    print(f"{args.times} rounds of {len(modules)} modules with {args.load} busy processes beside; logs in {args.logs}",
          flush=True)
    busy = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(args.load)]
    for p in busy:
        p.start()
    failed = 0
    try:
        for i in range(1, args.times + 1):
            seen = len(kernel_log())
            started = time.monotonic()
            code, summary = run_round(modules, args.logs / f"round-{i}.log")
            crashes = [line for line in kernel_log()[seen:] if KERNEL_CRASH.search(line)]
            verdict = "passed" if code == 0 else f"FAILED (exit {code})"
            print(f"round {i}/{args.times}: {verdict} in {time.monotonic() - started:.0f} s", flush=True)
            for line in [*summary.splitlines(), *(f"kernel: {c}" for c in crashes)]:
                print(f"  {line}", flush=True)
            if code != 0:
                failed += 1
                if not args.keep_going:
                    break
    finally:
        for p in busy:
            p.terminate()
    print(f"{failed} of the rounds run failed" if failed else "every round passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
