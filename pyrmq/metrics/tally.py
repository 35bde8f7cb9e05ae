"""Counters cheap enough for the send and pull paths: plain integers in
dicts, read by the exporter at scrape time (no prometheus_client call per
message). Each table keeps at most `limit` distinct keys; the rest are
counted under one key whose label values are `_other`, so random topic
names cannot grow memory without bound."""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

from pyrmq.metrics.names import MESSAGE_SIZE_BUCKETS, OTHER, RPC_LATENCY_BUCKETS_MS

K = TypeVar("K", bound=Hashable)


class Tally(Generic[K]):
    """key -> a list of `width` integers (callers add to the slots they
    own). `slot(key)` is the slow path, for a key not seen yet:

        c = tally.counts.get(key) or tally.slot(key)
        c[0] += n
    """

    __slots__ = ("counts", "limit", "other", "width")

    def __init__(self, width: int, limit: int, other: K) -> None:
        self.width = width
        self.limit = limit
        self.other = other
        self.counts: dict[K, list[int]] = {}

    def slot(self, key: K) -> list[int]:
        c = self.counts.get(key)
        if c is not None:
            return c
        if len(self.counts) >= self.limit:
            key = self.other
            c = self.counts.get(key)
            if c is not None:
                return c
        c = self.counts[key] = [0] * self.width
        return c

    def snapshot(self) -> list[tuple[K, list[int]]]:
        """A copy, for the exporter (taken on the event loop)."""
        return [(k, v.copy()) for k, v in self.counts.items()]


#: queues whose pull offset is kept (inflight messages); past it, queues
#: not seen yet have no inflight gauge
MAX_PULL_OFFSETS = 100_000

#: message-in slots: messages, bytes, size sum, then one per size bucket (+Inf last)
IN_WIDTH = 3 + len(MESSAGE_SIZE_BUCKETS) + 1
_SIZE_BOUNDS = MESSAGE_SIZE_BUCKETS


class BrokerTallies:
    """What the send and pull processors count. `sent(...)` and `pulled(...)`
    are the only calls on the hot paths."""

    MESSAGE_TYPES = ("normal", "delay", "transaction")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: (topic, message_type) -> [messages, bytes, size sum, buckets...]
        self.messages_in: Tally[tuple[str, str]] = Tally(IN_WIDTH, limit, (OTHER, "normal"))
        #: (topic, group) -> [messages, bytes]
        self.messages_out: Tally[tuple[str, str]] = Tally(2, limit, (OTHER, OTHER))
        #: (group, topic, queue_id) -> next offset the last pull asked from
        #: (inflight = it - committed); bounded by the queues of topics and
        #: groups, like the offset table itself
        self.pull_offsets: dict[tuple[str, str, int], int] = {}

    def sent(self, topic: str, message_type: str, count: int, nbytes: int) -> None:
        key = (topic, message_type)
        c = self.messages_in.counts.get(key) or self.messages_in.slot(key)
        c[0] += count
        c[1] += nbytes
        c[2] += nbytes
        size = nbytes // count if count > 1 else nbytes
        c[3 + bisect.bisect_left(_SIZE_BOUNDS, size)] += count

    def pulled(self, topic: str, group: str, count: int, nbytes: int) -> None:
        key = (topic, group)
        c = self.messages_out.counts.get(key) or self.messages_out.slot(key)
        c[0] += count
        c[1] += nbytes

    def pulled_to(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        key = (group, topic, queue_id)
        offsets = self.pull_offsets
        if key in offsets or len(offsets) < MAX_PULL_OFFSETS:
            offsets[key] = next_offset

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's pull offsets go (its counters stay: counters
        never go down)."""
        for key in [k for k in self.pull_offsets if k[1] == topic]:
            del self.pull_offsets[key]


#: rpc slots: count, sum in microseconds, then one per latency bucket (+Inf last)
RPC_WIDTH = 2 + len(RPC_LATENCY_BUCKETS_MS) + 1
_RPC_BOUNDS_US = tuple(b * 1000 for b in RPC_LATENCY_BUCKETS_MS)


class RpcTally:
    """rocketmq_rpc_latency: (request_code, response_code, result) -> counts.
    Request codes are the server's registered ones (bounded); response codes
    are few."""

    def __init__(self, limit: int = 4096) -> None:
        self.table: Tally[tuple[int, int, str]] = Tally(RPC_WIDTH, limit, (-1, -1, OTHER))

    def observe(self, request_code: int, response_code: int, result: str, micros: int) -> None:
        key = (request_code, response_code, result)
        c = self.table.counts.get(key) or self.table.slot(key)
        c[0] += 1
        c[1] += micros
        c[2 + bisect.bisect_left(_RPC_BOUNDS_US, micros)] += 1


def cumulative(buckets: Sequence[int]) -> list[int]:
    """Per-bucket counts -> Prometheus' cumulative ones."""
    out, total = [], 0
    for b in buckets:
        total += b
        out.append(total)
    return out
