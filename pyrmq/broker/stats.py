"""BrokerStatsManager: the per-topic and per-group counters behind
VIEW_BROKER_STATS_DATA (mqadmin statsAll), GET_TOPIC_STATS_INFO's
topicPutTps and GET_CONSUME_STATS's consumeTps, under RocketMQ's stats
names and keys:

    TOPIC_PUT_NUMS / TOPIC_PUT_SIZE   key: topic          (sends, messages / bytes)
    GROUP_GET_NUMS / GROUP_GET_SIZE   key: topic@group    (pulls that found messages)
    SNDBCK_PUT_NUMS                   key: topic@group    (messages sent back)
    BROKER_PUT_NUMS / BROKER_GET_NUMS key: cluster name   (all sends / pulls)

The hot path only adds to two integers of a counter (its value and how many
times it was added to; the BROKER_* totals are sums of the TOPIC_/GROUP_
counters, taken when asked); windows are computed when asked: a sampling task
snapshots every counter every 10 s (the minute ring), every minute (the
hour ring) and every hour (the day ring), as RocketMQ's StatsItem samples,
and a window's sum is the counter now minus the oldest snapshot in the
window, its tps that sum over the seconds covered, its avgpt the sum over
the times added (messages per send or pull)."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
)

#: (window, sample every n seconds, samples kept): RocketMQ's StatsItem
#: samples every 10 s for the minute, every 10 min for the hour (we take
#: every minute: finer at no real cost) and every hour for the day
SAMPLE_INTERVAL = 10.0
_RINGS = {"minute": (60.0, 1, 7), "hour": (3600.0, 6, 61), "day": (86400.0, 360, 25)}

Counter = list[int]  # [value, times]
#: a snapshot: when, and (value, times) by stats name and key
Snapshot = tuple[float, dict[str, dict[str, tuple[int, int]]]]
#: the cluster-wide totals are the sums of these (derived when asked, not
#: counted a second time on every send and pull)
_TOTAL_OF = {BROKER_PUT_NUMS: TOPIC_PUT_NUMS, BROKER_GET_NUMS: GROUP_GET_NUMS}
#: where a total's source keeps what forgotten topics/groups had counted
#: (a total never goes down; no topic or group name holds a NUL)
_RETIRED = "\x00retired"


class BrokerStatsManager:
    """Counters by stats name, then key, with lazily computed windows."""

    def __init__(self, cluster_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster_name = cluster_name
        self._clock = clock
        #: stats name -> key -> [value, times]; BROKER_*_NUMS are derived
        self.counters: dict[str, dict[str, Counter]] = {
            name: {} for name in STATS_NAMES if name not in _TOTAL_OF
        }
        self._ticks = 0
        start: Snapshot = (clock(), {})
        self._rings: dict[str, collections.deque[Snapshot]] = {
            name: collections.deque([start], maxlen=keep) for name, (_, _, keep) in _RINGS.items()
        }

    # -- the hot path: sends and pulls ---------------------------------------------------

    @staticmethod
    def _add(table: dict[str, Counter], key: str, value: int) -> None:
        c = table.get(key)
        if c is None:
            table[key] = [value, 1]
        else:
            c[0] += value
            c[1] += 1

    def inc_topic_put(self, topic: str, nums: int, size: int) -> None:
        """A send stored `nums` messages of `size` bytes in all."""
        counters = self.counters
        self._add(counters[TOPIC_PUT_NUMS], topic, nums)
        self._add(counters[TOPIC_PUT_SIZE], topic, size)

    def inc_group_get(self, group: str, topic: str, nums: int, size: int) -> None:
        """A pull of `group` found `nums` messages of `size` bytes in all."""
        key = f"{topic}@{group}"
        counters = self.counters
        self._add(counters[GROUP_GET_NUMS], key, nums)
        self._add(counters[GROUP_GET_SIZE], key, size)

    def inc_send_back(self, group: str, topic: str) -> None:
        self._add(self.counters[SNDBCK_PUT_NUMS], f"{topic}@{group}", 1)

    # -- sampling ------------------------------------------------------------------------

    def sample(self) -> None:
        """Snapshot the counters (every SAMPLE_INTERVAL seconds)."""
        self._ticks += 1
        snap: Snapshot = (
            self._clock(),
            {
                name: {k: (c[0], c[1]) for k, c in table.items()}
                for name, table in self.counters.items()
            },
        )
        for name, (_, every, _) in _RINGS.items():
            if self._ticks % every == 0:
                self._rings[name].append(snap)

    def forget(self, predicate: Callable[[str, str], bool]) -> None:
        """Drop the counters of a deleted topic or group."""
        sources = _TOTAL_OF.values()
        for name, table in self.counters.items():
            for k in [k for k in table if k != _RETIRED and predicate(name, k)]:
                c = table.pop(k)
                if name in sources:
                    self._add(table, _RETIRED, c[0])
                    table[_RETIRED][1] += c[1] - 1

    # -- windows -------------------------------------------------------------------------

    def has(self, name: str, key: str) -> bool:
        if name in _TOTAL_OF:
            return key == self.cluster_name and bool(self.counters[_TOTAL_OF[name]])
        return key in self.counters.get(name, {})

    def _value(self, counts: dict[str, dict[str, Any]], name: str, key: str) -> tuple[int, int]:
        """(value, times) of a counter in `counts` (the live counters or a
        snapshot's); a cluster-wide total is the sum of its source's."""
        source = _TOTAL_OF.get(name)
        if source is not None:
            table = counts.get(source, {})
            return sum(c[0] for c in table.values()), sum(c[1] for c in table.values())
        c = counts.get(name, {}).get(key)
        return (c[0], c[1]) if c is not None else (0, 0)

    def _since(
        self, ring: collections.deque[Snapshot], span: float, fallback: int
    ) -> tuple[float, dict[str, dict[str, tuple[int, int]]]]:
        """The oldest snapshot of ring within `span` seconds of now (half a
        sampling interval of slack), else ring[fallback]."""
        now = self._clock()
        for t, snap in ring:
            if now - t <= span + SAMPLE_INTERVAL / 2:
                return t, snap
        return ring[fallback]

    def window(self, name: str, key: str, window: str) -> dict[str, Any]:
        """BrokerStatsItem of one window: {"sum", "tps", "avgpt"}."""
        span, _, _ = _RINGS[window]
        base_t, base = self._since(self._rings[window], span, 0)
        value, times = self._value(self.counters, name, key)
        old_value, old_times = self._value(base, name, key)
        total, times = value - old_value, times - old_times
        elapsed = max(self._clock() - base_t, 1.0)
        return {
            "sum": total,
            "tps": round(total / elapsed, 2),
            "avgpt": round(total / times, 2) if times else 0.0,
        }

    def stats_data(self, name: str, key: str) -> dict[str, Any]:
        """BrokerStatsData: statsMinute, statsHour, statsDay."""
        return {
            "statsMinute": self.window(name, key, "minute"),
            "statsHour": self.window(name, key, "hour"),
            "statsDay": self.window(name, key, "day"),
        }

    def tps(self, name: str, key: str) -> float:
        """The minute window's tps (topicPutTps, consumeTps)."""
        return float(self.window(name, key, "minute")["tps"])

    def recent_tps(self, name: str, key: str, seconds: float) -> float:
        """Per second over about the last `seconds` (at the sampling's
        resolution: 10 s up to a minute, a minute up to an hour)."""
        ring = self._rings["minute" if seconds <= 60 else "hour"]
        base_t, base = self._since(ring, seconds, -1)
        value = self._value(self.counters, name, key)[0] - self._value(base, name, key)[0]
        return value / max(self._clock() - base_t, 1.0)

    def tps_text(self, name: str, key: str) -> str:
        """RocketMQ's runtime-info form: over 10 s, 60 s and 600 s."""
        return " ".join(f"{self.recent_tps(name, key, s):.2f}" for s in (10, 60, 600))


__all__ = ["STATS_NAMES", "BrokerStatsManager"]
