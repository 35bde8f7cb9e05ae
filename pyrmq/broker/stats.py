"""BrokerStatsManager: the per-topic and per-group counters behind
VIEW_BROKER_STATS_DATA (mqadmin statsAll), GET_TOPIC_STATS_INFO's
topicPutTps and GET_CONSUME_STATS's consumeTps, under RocketMQ's stats
names and keys:

    TOPIC_PUT_NUMS / TOPIC_PUT_SIZE   key: topic          (sends, messages / bytes)
    GROUP_GET_NUMS / GROUP_GET_SIZE   key: topic@group    (pulls that found messages)
    SNDBCK_PUT_NUMS                   key: topic@group    (messages sent back)
    BROKER_PUT_NUMS / BROKER_GET_NUMS key: cluster name   (all sends / pulls)

The hot path only adds to two integers of a counter (its value and how many
times it was added to); windows are computed when asked: a sampling task
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
Snapshot = tuple[float, dict[tuple[str, str], tuple[int, int]]]


class BrokerStatsManager:
    """Counters by (stats name, key) with lazily computed windows."""

    def __init__(self, cluster_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster_name = cluster_name
        self._clock = clock
        self.counters: dict[tuple[str, str], Counter] = {}
        self._ticks = 0
        start: Snapshot = (clock(), {})
        self._rings: dict[str, collections.deque[Snapshot]] = {
            name: collections.deque([start], maxlen=keep) for name, (_, _, keep) in _RINGS.items()
        }

    # -- the hot path: sends and pulls ---------------------------------------------------

    def _add(self, name: str, key: str, value: int) -> None:
        c = self.counters.get((name, key))
        if c is None:
            self.counters[(name, key)] = [value, 1]
        else:
            c[0] += value
            c[1] += 1

    def inc_topic_put(self, topic: str, nums: int, size: int) -> None:
        """A send stored `nums` messages of `size` bytes in all."""
        self._add(TOPIC_PUT_NUMS, topic, nums)
        self._add(TOPIC_PUT_SIZE, topic, size)
        self._add(BROKER_PUT_NUMS, self.cluster_name, nums)

    def inc_group_get(self, group: str, topic: str, nums: int, size: int) -> None:
        """A pull of `group` found `nums` messages of `size` bytes in all."""
        key = f"{topic}@{group}"
        self._add(GROUP_GET_NUMS, key, nums)
        self._add(GROUP_GET_SIZE, key, size)
        self._add(BROKER_GET_NUMS, self.cluster_name, nums)

    def inc_send_back(self, group: str, topic: str) -> None:
        self._add(SNDBCK_PUT_NUMS, f"{topic}@{group}", 1)

    # -- sampling ------------------------------------------------------------------------

    def sample(self) -> None:
        """Snapshot the counters (every SAMPLE_INTERVAL seconds)."""
        self._ticks += 1
        snap: Snapshot = (self._clock(), {k: (c[0], c[1]) for k, c in self.counters.items()})
        for name, (_, every, _) in _RINGS.items():
            if self._ticks % every == 0:
                self._rings[name].append(snap)

    def forget(self, predicate: Callable[[str, str], bool]) -> None:
        """Drop the counters of a deleted topic or group."""
        for k in [k for k in self.counters if predicate(*k)]:
            del self.counters[k]

    # -- windows -------------------------------------------------------------------------

    def has(self, name: str, key: str) -> bool:
        return (name, key) in self.counters

    def window(self, name: str, key: str, window: str) -> dict[str, Any]:
        """BrokerStatsItem of one window: {"sum", "tps", "avgpt"}."""
        span, _, _ = _RINGS[window]
        now = self._clock()
        c = self.counters.get((name, key), [0, 0])
        ring = self._rings[window]
        base_t, base = ring[0]
        for t, snap in ring:  # the oldest snapshot still inside the window
            if now - t <= span + SAMPLE_INTERVAL / 2:
                base_t, base = t, snap
                break
        old_value, old_times = base.get((name, key), (0, 0))
        total, times = c[0] - old_value, c[1] - old_times
        elapsed = max(now - base_t, 1.0)
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
        now = self._clock()
        c = self.counters.get((name, key), [0, 0])
        base_t, base = ring[-1]
        for t, snap in ring:  # the oldest snapshot inside the span
            if now - t <= seconds + SAMPLE_INTERVAL / 2:
                base_t, base = t, snap
                break
        return (c[0] - base.get((name, key), (0, 0))[0]) / max(now - base_t, 1.0)

    def tps_text(self, name: str, key: str) -> str:
        """RocketMQ's runtime-info form: over 10 s, 60 s and 600 s."""
        return " ".join(f"{self.recent_tps(name, key, s):.2f}" for s in (10, 60, 600))


__all__ = ["STATS_NAMES", "BrokerStatsManager"]
