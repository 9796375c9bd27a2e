"""TWAMP-light loss, delay and jitter against the real kernel (issue #27): a prober in one namespace probes four
reflectors through the delay line, whose links drop packets at 0, 0.01 %, 0.1 % and 1 % (towards the reflector
only, so the round-trip loss is the set rate) and delay them by known amounts each way.

Windows. The reported loss must fall inside the central 99.9 % binomial interval of the set rate for the packets
sent. At the product's 10 packets/s a minute is 600 packets: that says nothing about 0.01 % (the interval is [0, 1]
packets, and 0 lost is the likeliest outcome also at 0.001 %). To tell 0.01 % from no loss at all (P(0 lost) <
0.1 %) a window needs n * p >= 6.9, i.e. 69,000 packets: 1 h 55 min at 10 packets/s (`make bench-loss` runs such
long windows). This test sends LOSS_RATE packets/s for LOSS_PERIODS short periods instead, summed: 15,000 packets
per link in 30 s, where the 99.9 % intervals are 0.01 %: [0, 7], 0.1 %: [5, 29], 1 %: [114, 187] packets; delays
and jitter are checked in a run at the product's 10 packets/s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy.stats import binom
from tpcmesh_agent.twamp.clock import read_clock
from tpcmesh_lab.netns import Lab, netns_unavailable_reason
from tpcmesh_lab.profile import parse_profile
from tpcmesh_lab.stallmeter import StallMeter

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"no netns lab: {netns_unavailable_reason()}"),
]

# Two runs in one lab, one after the other: delay and jitter at the product's rate (10 packets/s: the delay line and
# the probes then load the machine no more than in use), loss at LOSS_RATE (15,000 packets per link over
# LOSS_PERIODS periods). Periods start on multiples of their length on the wall clock and the prober's first,
# partial one does not count: short loss periods wait ~1 s for it where one 30 s period waited 15 s on average.
RATE, PERIOD = 10, 10
LOSS_RATE, LOSS_PERIOD, LOSS_PERIODS = 500, 2, 15
PORT = 863
# reflector: (loss % towards it, one-way delay ms each way)
LINKS = {"clean": (0.0, 5.0), "l001": (0.01, 3.0), "l01": (0.1, 8.0), "l1": (1.0, 12.0)}
CONFIDENCE = 0.999
DELAY_TOLERANCE_MS = 0.5
# The medians may sit higher: the delay line is a user-space process, and on a loaded CI machine each pass released
# packets ~0.3 ms later than its lateness compensation (capped at 0.3 ms) allows for: RTT min 10.24 / median 10.57 ms
# on the 10 ms clean link in two clean-clone runs. The minimum still holds the set delay to DELAY_TOLERANCE_MS.
# A one-way median gets the same margin: half of it was too tight on this machine when it ran ~40 % slower than an
# hour before without any stop the StallMeter below saw (+0.57 ms forward on the clean link over IPv6).
MEDIAN_ABOVE_MS = 1.0
# median |IPDV| on the clean link, each direction: the delay line adds none; what is left is the scheduling noise
# of a small machine (0.04-0.1 ms measured at a load average of 8 on 2 cores; the mean |IPDV| was 1 ms there,
# from the odd packet a busy delay line releases milliseconds late, so it is reported, not asserted)
CLEAN_JITTER_MS = 0.25
# On top of both, what the machine itself added in the same seconds (tpcmesh_lab.stallmeter): a packet waits for the
# delay line to run and read it, and again to release it, and the probe that sends it stamps its time before the
# send (a stop in between counts as delay), so a one-way delay passes three such waits, a round trip and an IPDV
# (two packets' one-way delays) six. 0 on a quiet machine. A clean-clone CI run on a slow machine (its tests
# took 63 minutes, not 36) saw the clean link's RTT median at 11.45 ms and its median |IPDV| at 0.37 ms.


def probe(lab: Lab, peers: list[str], rate: int, period: int, periods: int = 1) -> dict[str, list[dict]]:
    """``periods`` whole periods' summaries per peer, in order, from a prober in the ``prober`` namespace."""
    prober = lab.node("prober")
    proc = lab.popen("prober", [sys.executable, "-m", "tpcmesh_agent.twamp", "--address", prober.address,
                                "--address", prober.address6, "--port", str(PORT), "--rate", str(rate),
                                "--period", str(period), "--loss-timeout", "2", "--periods", str(periods),
                                *(x for p in peers for x in ("--peer", p))],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=(periods + 2) * period + 30)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    full: dict[str, list[dict]] = {}
    for r in records:
        if not r["partial"]:
            full.setdefault(r["peer"], []).append(r)
    assert len(full) == len(peers), (records, err)
    for name, rs in full.items():
        # each period once, in order
        assert [r["period_start"] for r in rs] == sorted({r["period_start"] for r in rs}), (name, rs)
        assert len(rs) == periods, (name, rs)
    for rs in full.values():  # the figures, for the record (pytest -s): the counts of all periods, the last's delays
        r = rs[-1]
        print(f"{rate}/s {r['peer']}, {periods} x {period} s: sent {sum(x['sent'] for x in rs)} lost "
              f"{sum(x['lost'] for x in rs)} reordered {sum(x['reordered'] for x in rs)} rtt {r['rtt_ms']} "
              f"one-way {r['one_way_ms']['forward']} {r['one_way_ms']['backward']} ipdv {r['ipdv_ms']}")
    return full


COUNTS = ("sent", "lost", "duplicates", "send_errors")


def totals(records: list[dict]) -> dict[str, int]:
    """The loss run's counts over all its periods (one binomial window of their packets)."""
    return {k: sum(r[k] for r in records) for k in COUNTS}


def wait_ready(proc: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    """Until the twamp process has said READY on stderr (written to ``log``): its sockets are bound."""
    deadline = time.monotonic() + timeout
    while "READY" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    links = []
    for name, (loss, delay) in LINKS.items():
        links.append({"from": "prober", "to": name, "delayMs": delay, "lossPercent": loss})
        links.append({"from": name, "to": "prober", "delayMs": delay})
    profile = parse_profile({"nodes": ["prober", *LINKS], "links": links}, "loss-lab")
    with Lab(profile, mode="netns") as lab:
        prober = lab.node("prober")
        logs = tmp_path_factory.mktemp("reflectors")
        reflectors = {}
        for name in LINKS:
            node = lab.node(name)
            with (logs / name).open("w") as log:
                reflectors[name] = lab.popen(name, [sys.executable, "-m", "tpcmesh_agent.twamp", "--address",
                                                    node.address, "--address", node.address6, "--port", str(PORT),
                                                    "--reflect", prober.address, "--reflect", prober.address6],
                                             stdout=subprocess.DEVNULL, stderr=log)
        peers = [f"{name}={lab.node(name).address}" for name in LINKS]
        peers.append(f"clean6={lab.node('clean').address6}")  # the clean reflector over IPv6 as well
        for name, proc in reflectors.items():
            wait_ready(proc, logs / name)
        with StallMeter() as meter:
            product = {name: rs[0] for name, rs in probe(lab, peers, RATE, PERIOD).items()}
        print(f"the machine during the product-rate run: {meter.summary()}")
        loss = {name: totals(rs) for name, rs in probe(lab, peers[:-1], LOSS_RATE, LOSS_PERIOD, LOSS_PERIODS).items()}
        machine = {"one_way": meter.median_bound_ms(3), "round_trip": meter.median_bound_ms(6)}
        yield {"product": product, "loss": loss, "machine": machine}


@pytest.mark.parametrize("name", list(LINKS))
def test_loss_is_inside_the_binomial_interval_of_the_set_rate(runs, name):
    s = runs["loss"][name]
    rate = LINKS[name][0] / 100
    low, high = binom.interval(CONFIDENCE, s["sent"], rate)
    want = LOSS_RATE * LOSS_PERIOD * LOSS_PERIODS
    # Never above the rate; below it when the machine stalls the prober, whose loop then skips ahead rather than
    # burst (14,549 of 15,000 in a slow CI run). The interval is the one for the packets it did send.
    assert 0.8 * want <= s["sent"] <= want, s
    assert low <= s["lost"] <= high, (name, s["sent"], s["lost"], (low, high))
    # (no reordering asserted: the delay line may swap packets sent microseconds apart, see the report)
    assert s["duplicates"] == 0 and s["send_errors"] == 0


@pytest.mark.parametrize("name", [*LINKS, "clean6"])
def test_delays_match_the_profile(runs, name):
    s = runs["product"][name]
    delay = LINKS[name.removesuffix("6")][1]
    machine = runs["machine"]
    assert -DELAY_TOLERANCE_MS <= s["rtt_ms"]["median"] - 2 * delay <= MEDIAN_ABOVE_MS + machine["round_trip"], \
        (s["rtt_ms"], machine)
    assert abs(s["rtt_ms"]["min"] - 2 * delay) <= DELAY_TOLERANCE_MS, s["rtt_ms"]
    # every namespace reads the same kernel clock: the one-way delays are exact even when adjtimex says the
    # clock is not synchronised (then they are marked untrusted, as on two real hosts)
    for direction in ("forward", "backward"):
        assert -DELAY_TOLERANCE_MS <= s["one_way_ms"][direction]["median"] - delay \
            <= MEDIAN_ABOVE_MS + machine["one_way"], (s["one_way_ms"], machine)
    clock = read_clock()
    assert s["one_way_ms"]["trusted"] is (clock.synchronized and 2 * clock.esterror_s <= 0.001)


def test_jitter_is_about_zero_on_a_clean_link(runs):
    for name in ("clean", "clean6"):
        s = runs["product"][name]
        for direction in ("forward", "backward"):
            assert s["ipdv_ms"][direction]["median_abs"] <= CLEAN_JITTER_MS + runs["machine"]["round_trip"], \
                (name, s["ipdv_ms"], runs["machine"])
            assert s["ipdv_ms"][direction]["pairs"] == s["received"] - 1 == RATE * PERIOD - 1
