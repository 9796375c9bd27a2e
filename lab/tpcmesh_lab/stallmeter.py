"""How long this machine makes a packet wait for a user-space process, measured while a timing check runs.

The lab's links are a user-space process (the delay line): each packet waits for it to run and read it, and again
to release it. On a quiet machine that is ~0.05 ms; on a loaded CI host or a throttled virtual machine every process
stops now and then for milliseconds, and a packet that arrives in such a stop waits for its end. A check that holds
what the product measures to the profile's delays allows for what the machine did in the same seconds, measured
beside it, not for a guessed margin.

A thread sleeps 1 ms at a time (1 ns of timer slack, as the delay line) and records how late each wake-up is: a
wake-up L late means the process could not run for L. A packet arriving at a random instant during that stop waits
for what is left of it, so over the whole window the time-weighted share of arrivals that wait longer than w is
sum(max(L - w, 0)) / window. ``wait_ms(q)`` is the w of share 1 - q: 0 on a quiet machine, where the stops are too
short and rare to hold a sizeable share of arrivals (a 1 ms sleep that wakes 0.07 ms late is 6 % of the time).

A figure that passes k such waits (a round trip through the delay line passes four: a read and a release each way)
exceeds k * wait_ms(1 - 0.5 / k) only when one of its waits exceeds wait_ms(1 - 0.5 / k), which happens to at most
half of such figures (the union bound): ``median_bound_ms(k)`` bounds what the machine adds to the figures' median.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from types import TracebackType

from .delayline import PR_SET_TIMERSLACK


class StallMeter:
    """``with StallMeter() as m: ...`` then ``m.summary()`` or ``m.median_bound_ms(k)``."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.late_s: list[float] = []
        self.window_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-meter", daemon=True)

    def _run(self) -> None:
        try:  # the slack is the thread's own, as the delay line sets its own
            ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1)
        except (OSError, AttributeError):
            pass
        clock, sleep, interval = time.perf_counter, time.sleep, self.interval_s
        started = clock()
        while not self._stop.is_set():
            asleep = clock()
            sleep(interval)
            self.late_s.append(max(clock() - asleep - interval, 0.0))
        self.window_s = clock() - started

    def __enter__(self) -> StallMeter:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def wait_ms(self, q: float) -> float:
        """The q-quantile of how long a packet arriving at a random instant of the window waits for a process."""
        if not self.late_s:
            raise ValueError("the stall meter took no sample (was it used as a context manager?)")
        allowed = (1 - q) * self.window_s  # the time in which arrivals may wait longer than the answer
        late = sorted(self.late_s, reverse=True)
        total = 0.0
        for k, stop in enumerate(late, start=1):
            total += stop
            after = late[k] if k < len(late) else 0.0
            if total - k * after >= allowed:  # the answer lies in [after, stop]: sum(top k) - k * w = allowed
                return round(max((total - allowed) / k, 0.0) * 1000, 4)
        return 0.0

    def median_bound_ms(self, waits: int) -> float:
        """At most this much of a figure's median is the machine's, for figures that each pass ``waits`` waits."""
        return round(waits * self.wait_ms(1 - 0.5 / waits), 4)

    def summary(self) -> dict[str, float | int]:
        late = sorted(x * 1000 for x in self.late_s)
        if not late:
            raise ValueError("the stall meter took no sample (was it used as a context manager?)")
        return {"wakeups": len(late), "window_s": round(self.window_s, 3),
                "late_median_ms": round(statistics.median(late), 4), "late_max_ms": round(late[-1], 4),
                "stopped_share": round(sum(late) / 1000 / self.window_s, 4) if self.window_s else 0.0,
                "wait_p75_ms": self.wait_ms(0.75), "wait_p875_ms": self.wait_ms(0.875)}
