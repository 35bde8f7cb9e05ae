"""Counters of `pyrmq bench`: a mergeable latency histogram, and a Meter
that counts one direction of traffic (sends, or deliveries) over the whole
run and over the current one-second interval.

Everything here pickles to plain dicts (`state()` / `from_state()`), so the
processes of `pyrmq bench --processes N` send their counts to the parent,
which merges them."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

#: values below this many microseconds get a bucket each (exact)
_EXACT = 128
#: buckets per power of two above _EXACT: a bucket is at most 1/64 (1.6%) wide
_SUB_BITS = 6
#: distinct error texts a Meter keeps (the rest are counted under "other")
_MAX_ERRORS = 10


def _bucket(us: int) -> int:
    if us < _EXACT:
        return us if us > 0 else 0
    e = us.bit_length() - (_SUB_BITS + 1)
    return (e << _SUB_BITS) + (us >> e)


def _bucket_mid(i: int) -> float:
    if i < _EXACT:
        return float(i)
    e = (i >> _SUB_BITS) - 1
    m = i - (e << _SUB_BITS)
    return ((m << e) + ((m + 1) << e) - 1) / 2


class Histogram:
    """Latencies in integer microseconds, in log-linear buckets (as
    HdrHistogram does): exact below 128 µs, then 64 buckets per power of
    two, so a percentile is within 1.6% of the true value. Min, max, count
    and sum are exact."""

    __slots__ = ("counts", "max", "min", "n", "sum")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.sum = 0
        self.min = 0
        self.max = 0

    def record(self, us: int) -> None:
        i = _bucket(us)
        c = self.counts
        c[i] = c.get(i, 0) + 1
        if self.n == 0 or us < self.min:
            self.min = us
        if us > self.max:
            self.max = us
        self.n += 1
        self.sum += us

    def merge(self, other: Histogram) -> None:
        if not other.n:
            return
        c = self.counts
        for i, k in other.counts.items():
            c[i] = c.get(i, 0) + k
        self.min = other.min if self.n == 0 else min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.n += other.n
        self.sum += other.sum

    def percentile(self, q: float) -> float:
        """The q-quantile (0 < q <= 1) in microseconds; 0 when empty."""
        if not self.n:
            return 0.0
        if q >= 1.0:
            return float(self.max)
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= rank:
                return min(max(_bucket_mid(i), float(self.min)), float(self.max))
        return float(self.max)  # not reached: the counts add up to n

    @property
    def avg(self) -> float:
        return self.sum / self.n if self.n else 0.0

    def summary_ms(self) -> dict[str, float]:
        """avg, min, p50, p90, p99, p99.9 and max, in milliseconds."""
        ms = {"avg": self.avg, "min": float(self.min if self.n else 0)}
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)):
            ms[name] = self.percentile(q)
        ms["max"] = float(self.max)
        return {k: round(v / 1000, 3) for k, v in ms.items()}

    def state(self) -> dict[str, Any]:
        return {"counts": self.counts, "n": self.n, "sum": self.sum, "min": self.min,
                "max": self.max}  # fmt: skip

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> Histogram:
        h = cls()
        h.counts = {int(k): int(v) for k, v in s["counts"].items()}
        h.n, h.sum, h.min, h.max = s["n"], s["sum"], s["min"], s["max"]
        return h


class Tally:
    """Messages, bytes, failures and latencies over one span of time."""

    __slots__ = ("bytes", "failures", "lat", "msgs")

    def __init__(self) -> None:
        self.msgs = 0
        self.bytes = 0
        self.failures = 0
        self.lat = Histogram()

    def merge(self, other: Tally) -> None:
        self.msgs += other.msgs
        self.bytes += other.bytes
        self.failures += other.failures
        self.lat.merge(other.lat)

    def state(self) -> dict[str, Any]:
        return {"msgs": self.msgs, "bytes": self.bytes, "failures": self.failures,
                "lat": self.lat.state()}  # fmt: skip

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> Tally:
        t = cls()
        t.msgs, t.bytes, t.failures = s["msgs"], s["bytes"], s["failures"]
        t.lat = Histogram.from_state(s["lat"])
        return t


class Meter:
    """One direction of traffic: `total` over the run, `interval` since the
    last take_interval() (the live line), the times of the first and last
    event (perf_counter seconds), and failures counted by their text."""

    __slots__ = ("errors", "first", "interval", "last", "total")

    def __init__(self) -> None:
        self.total = Tally()
        self.interval = Tally()
        self.first = 0.0
        self.last = 0.0
        self.errors: Counter[str] = Counter()

    def ok(self, msgs: int, nbytes: int, now: float) -> None:
        """`msgs` messages of `nbytes` bytes went through at `now`."""
        t, i = self.total, self.interval
        t.msgs += msgs
        t.bytes += nbytes
        i.msgs += msgs
        i.bytes += nbytes
        if not self.first:
            self.first = now
        self.last = now

    def latency(self, us: int) -> None:
        self.total.lat.record(us)
        self.interval.lat.record(us)

    def fail(self, msgs: int, error: BaseException | str) -> None:
        self.total.failures += msgs
        self.interval.failures += msgs
        text = error if isinstance(error, str) else (str(error) or type(error).__name__)
        if text in self.errors or len(self.errors) < _MAX_ERRORS:
            self.errors[text] += msgs
        else:
            self.errors["other"] += msgs

    def take_interval(self) -> Tally:
        out, self.interval = self.interval, Tally()
        return out

    def merge(self, other: Meter) -> None:
        self.total.merge(other.total)
        if other.first and (not self.first or other.first < self.first):
            self.first = other.first
        self.last = max(self.last, other.last)
        self.errors.update(other.errors)

    @property
    def seconds(self) -> float:
        """From the first event to the last."""
        return self.last - self.first if self.first else 0.0

    def state(self) -> dict[str, Any]:
        return {"total": self.total.state(), "first": self.first, "last": self.last,
                "errors": dict(self.errors)}  # fmt: skip

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> Meter:
        m = cls()
        m.total = Tally.from_state(s["total"])
        m.first, m.last = s["first"], s["last"]
        m.errors = Counter(s["errors"])
        return m
