"""`make bench-diagnosis` (issue #26): inject each cause on chosen pairs of one mesh, score the labels.

Pure parts (this module, unit-tested): the **injection plan** — one WAN profile and the pairs to score — and the
**scorer** — a confusion matrix of injected cause against the limit the model named. The run between them is
``diagnosisrun.py`` for now (iperf3 alone, the figures read where the lab holds them); with the agents' host
telemetry it can run the real protocols through the operator's executor and the dashboard's diagnosis.

The plan. Faults are of two kinds. A *link* fault (delay with large buffers, loss, a rate) belongs to one link, so
it is put on a link between two healthy nodes that no other scored pair uses. A *host* fault (a small buffer, a CPU
quota) belongs to a node, so each gets a node of its own, paired with a healthy node on the side the fault is not
on: a small receive buffer or a starved destination receives, a small send buffer or a starved source sends. Every
other buffer in the mesh is large (``LARGE_BUFFER``), so only the injected fault limits a window. Window and loss
causes need a long RTT to show; CPU causes a short one (over a long path a starved host is window-limited first).
Each scored pair runs at 1 and 8 streams. Loss is scored with a loss-based sender (cubic): the Mathis bound is no
bound for BBR, which this machine's kernel uses by default.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MiB = 1 << 20
LARGE_BUFFER = 64 * MiB
SMALL_BUFFER = 1 * MiB
LONG_DELAY_MS = 26.5  # one way: the default profile's far node, RTT 53 ms
SHORT_DELAY_MS = 0.15
# The delay line is a user-space process on a shared machine: loaded, it carried ~1.1 Gbit/s at 8 streams (quiet:
# 6.6). So the healthy long path is shaped by the kernel (HEALTHY_MBIT), well below that, or the delay line, not the
# path, would bind.
HEALTHY_MBIT = 400
LOSS_PERCENT = 0.1
RATE_MBIT = 500
CPU_QUOTA = 0.01  # cores, once the agents are up (see Plan.quotas)
STARTUP_QUOTA = 1.0  # cores while the agents start: at 0.01 an agent's start alone would take minutes
STREAMS = (1, 8)


@dataclass(frozen=True)
class Cause:
    name: str
    expected: str  # the limit the model must name
    kind: str  # "link" or "host"
    side: str = ""  # host causes: "source" or "destination", the end the fault is on
    delay_ms: float = LONG_DELAY_MS
    link: tuple[tuple[str, float], ...] = ()  # extra link fields (lossPercent, rateMbit)
    host: tuple[tuple[str, float], ...] = ()  # the faulty node's hosts fields
    congestion_control: str | None = None
    streams: tuple[int, ...] = ()  # scored at these stream counts only; empty: the plan's


CAUSES = (
    Cause(f"healthy long path at its {HEALTHY_MBIT} Mbit/s, large buffers", "network-capacity", "link",
          link=(("rateMbit", HEALTHY_MBIT),)),
    Cause("small receive buffer on the destination", "receive-window", "host", "destination",
          host=(("tcpRmemMaxBytes", SMALL_BUFFER),)),
    Cause("small send buffer on the source", "send-buffer", "host", "source",
          host=(("tcpWmemMaxBytes", SMALL_BUFFER),)),
    Cause(f"{LOSS_PERCENT:g} % loss on one link", "loss", "link", link=(("lossPercent", LOSS_PERCENT),),
          congestion_control="cubic"),
    Cause(f"a short link limited to {RATE_MBIT} Mbit/s", "network-capacity", "link", delay_ms=SHORT_DELAY_MS,
          link=(("rateMbit", RATE_MBIT),)),
    Cause("a CPU-starved source", "source-cpu", "host", "source", SHORT_DELAY_MS, host=(("cpuQuota", CPU_QUOTA),)),
    Cause("a CPU-starved destination", "destination-cpu", "host", "destination", SHORT_DELAY_MS,
          host=(("cpuQuota", CPU_QUOTA),)),
)

# The default suite's loss cause (tests/integration/lab/test_lab_diagnosis.py), which must hold on a loaded machine:
# - at 0.1 % over 53 ms the Mathis bound at 8 streams (MSS 64,948 B, the lab's 65,000 MTU) is ~4 Gbit/s, above a
#   loaded delay line's ceiling, which then binds instead; at 1 % over 100 ms RTT it is ~0.5 Gbit/s;
# - 8 streams only: a stream sees ~1.22 × seconds × √p ÷ RTT loss events in a test whatever the MSS, about 4 in 3 s
#   for one stream here, too few to estimate p (one stream was 0.8–2.7 × its Mathis bound); 8 streams see ~30.
LOSS_UNDER_LOAD = Cause("1 % loss on one long link", "loss", "link", delay_ms=50.0, link=(("lossPercent", 1.0),),
                        congestion_control="cubic", streams=(8,))
SUITE_CAUSES = tuple(LOSS_UNDER_LOAD if c.expected == "loss" else c for c in CAUSES)


@dataclass(frozen=True)
class ScoredTest:
    cause: Cause
    source: str
    destination: str
    streams: int


@dataclass(frozen=True)
class Plan:
    profile: dict  # a WanProfile document (profile.parse_profile takes it)
    tests: tuple[ScoredTest, ...]
    quotas: dict[str, float]  # node -> cores, to set (CpuGroup.set_quota) once its agent is ready


def plan(causes: Sequence[Cause] = CAUSES, pairs_per_cause: int = 2, streams: Sequence[int] = STREAMS) -> Plan:
    """One mesh where each cause sits on ``pairs_per_cause`` pairs of its own."""
    if pairs_per_cause < 1:
        raise ValueError(f"pairs_per_cause must be at least 1, got {pairs_per_cause}")
    link_pairs = sum(pairs_per_cause for c in causes if c.kind == "link")
    healthy = 2
    while healthy * (healthy - 1) // 2 < link_pairs or healthy < 2:
        healthy += 1
    names = [f"ok-{i + 1}" for i in range(healthy)]
    free_links = iter(itertools.combinations(names, 2))
    hosts: list[dict] = [{"node": n, "tcpRmemMaxBytes": LARGE_BUFFER, "tcpWmemMaxBytes": LARGE_BUFFER}
                         for n in names]
    links: list[dict] = []
    tests: list[ScoredTest] = []
    quotas: dict[str, float] = {}
    for c_index, cause in enumerate(causes):
        for k in range(pairs_per_cause):
            if cause.kind == "link":
                src, dst = next(free_links)
                links.append({"between": [src, dst], "delayMs": cause.delay_ms, **dict(cause.link)})
            elif cause.kind == "host":
                faulty = f"fault-{c_index + 1}-{k + 1}"
                names.append(faulty)
                fault = dict(cause.host)
                if "cpuQuota" in fault:
                    quotas[faulty] = fault["cpuQuota"]
                    fault["cpuQuota"] = STARTUP_QUOTA
                hosts.append({"node": faulty, "tcpRmemMaxBytes": LARGE_BUFFER, "tcpWmemMaxBytes": LARGE_BUFFER,
                              **fault})
                partner = names[k % healthy]
                src, dst = (faulty, partner) if cause.side == "source" else (partner, faulty)
                links.append({"between": [src, dst], "delayMs": cause.delay_ms, **dict(cause.link)})
            else:
                raise ValueError(f"cause {cause.name!r}: kind must be link or host, got {cause.kind!r}")
            tests += [ScoredTest(cause, src, dst, s) for s in cause.streams or streams]
    profile = {"kind": "WanProfile", "nodes": names, "defaultLink": {"delayMs": SHORT_DELAY_MS}, "links": links,
               "hosts": hosts}
    return Plan(profile, tuple(tests), quotas)


@dataclass(frozen=True)
class Score:
    matrix: dict[str, Counter]  # cause name -> predicted limit -> count
    expected: dict[str, str]
    right: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0

    def table(self) -> list[str]:
        """Markdown: one row per cause, one column per limit named, the right ones in bold."""
        predicted = sorted({p for row in self.matrix.values() for p in row})
        lines = ["| injected cause | expected | " + " | ".join(predicted) + " | right |",
                 "|---|---|" + "---|" * len(predicted) + "---|"]
        for cause, row in self.matrix.items():
            want = self.expected[cause]
            cells = [(f"**{row[p]}**" if p == want else str(row[p])) if row[p] else "" for p in predicted]
            lines.append(f"| {cause} | {want} | " + " | ".join(cells) + f" | {row[want]}/{sum(row.values())} |")
        lines.append(f"\n{self.right} of {self.total} labelled right ({self.accuracy:.0%}).")
        return lines


def score(results: Iterable[tuple[ScoredTest, str]]) -> Score:
    """``results``: each scored test with the limit the model named for it."""
    matrix: dict[str, Counter] = {}
    expected: dict[str, str] = {}
    right = total = 0
    for test, predicted in results:
        matrix.setdefault(test.cause.name, Counter())[predicted] += 1
        expected[test.cause.name] = test.cause.expected
        right += predicted == test.cause.expected
        total += 1
    return Score(matrix, expected, right, total)
