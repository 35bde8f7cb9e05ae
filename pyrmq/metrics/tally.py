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

#: message-in slots: messages, bytes (also the size histogram's sum), then
#: one per size bucket (+Inf last)
IN_WIDTH = 2 + len(MESSAGE_SIZE_BUCKETS) + 1
_SIZE_BOUNDS = MESSAGE_SIZE_BUCKETS
_FIRST_BOUND = MESSAGE_SIZE_BUCKETS[0]
MESSAGE_TYPES = ("normal", "delay", "transaction")


class BrokerTallies:
    """What the send and pull processors count. `sent(...)`, `pulled(...)`
    and `pulled_to(...)` are the only calls on the hot paths: a dict lookup
    by topic (no tuple made per message) and a few integer additions."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: message_type -> topic -> [messages, bytes, size buckets...]; each
        #: type holds at most `limit` topics
        self.messages_in: dict[str, Tally[str]] = {
            t: Tally(IN_WIDTH, limit, OTHER) for t in MESSAGE_TYPES
        }
        self._normal = self.messages_in["normal"]
        #: (topic, group) -> [messages, bytes]
        self.messages_out: Tally[tuple[str, str]] = Tally(2, limit, (OTHER, OTHER))
        #: (group, topic, queue_id) -> next offset the last pull asked from
        #: (inflight = it - committed); bounded by the queues of topics and
        #: groups, like the offset table itself
        self.pull_offsets: dict[tuple[str, str, int], int] = {}

    def sent(self, topic: str, message_type: str, count: int, nbytes: int) -> None:
        t = self._normal if message_type == "normal" else self.messages_in[message_type]
        c = t.counts.get(topic) or t.slot(topic)
        c[0] += count
        c[1] += nbytes
        size = nbytes if count == 1 else nbytes // count
        if size <= _FIRST_BOUND:
            c[2] += count
        else:
            c[2 + bisect.bisect_left(_SIZE_BOUNDS, size)] += count

    def in_snapshot(self) -> list[tuple[str, str, list[int]]]:
        """(topic, message_type, slots) copies, for the exporter."""
        return [(k, t, v) for t, tally in self.messages_in.items() for k, v in tally.snapshot()]

    def in_label_values(self) -> int:
        return sum(len(t.counts) for t in self.messages_in.values())

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
_RPC_FIRST_US = _RPC_BOUNDS_US[0]
RPC_RESULTS = ("success", "oneway", "deferred", "process_request_failed")
_RESULT_INDEX = {r: i for i, r in enumerate(RPC_RESULTS)}


class RpcTally:
    """rocketmq_rpc_latency: (request_code, response_code, result) -> counts,
    keyed by one integer (no tuple per request). Request codes are the
    server's registered ones, response codes are few: bounded anyway."""

    def __init__(self, sample_every: int = 1, limit: int = 4096) -> None:
        self.table: Tally[int] = Tally(RPC_WIDTH, limit, -1)
        #: the server times one request in this many (on average): each
        #: observation stands for this many requests at export
        self.sample_every = sample_every

    def observe(self, request_code: int, response_code: int, result: str, micros: int) -> None:
        key = (request_code << 24) | ((response_code + 1) & 0xFFFF) << 4 | _RESULT_INDEX[result]
        c = self.table.counts.get(key) or self.table.slot(key)
        c[0] += 1
        c[1] += micros
        if micros <= _RPC_FIRST_US:
            c[2] += 1
        else:
            c[2 + bisect.bisect_left(_RPC_BOUNDS_US, micros)] += 1

    def snapshot(self) -> list[tuple[tuple[str, str, str], list[int]]]:
        """((request_code, response_code, result) labels, slots) copies,
        scaled to estimates of all requests when sampled."""
        out = []
        k = self.sample_every
        for key, c in self.table.snapshot():
            if k > 1:
                c = [v * k for v in c]
            if key == -1:
                labels = (OTHER, OTHER, OTHER)
            else:
                response = ((key >> 4) & 0xFFFF) - 1
                labels = (str(key >> 24), str(response), RPC_RESULTS[key & 0xF])
            out.append((labels, c))
        return out


def cumulative(buckets: Sequence[int]) -> list[int]:
    """Per-bucket counts -> Prometheus' cumulative ones."""
    out, total = [], 0
    for b in buckets:
        total += b
        out.append(total)
    return out
