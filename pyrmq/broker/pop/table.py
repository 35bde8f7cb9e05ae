"""CheckpointTable: the messages out under POP, found by key, by deadline,
by queue and by the revive log record holding them, each in O(log n) or
better (the revive loop looks every 200 ms: a scan of every message out
would cost it in proportion)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from pyrmq.broker.pop.receipt import Checkpoint, CkKey

QueueKey = tuple[str, str, int]  # group, topic read, queue id


class CheckpointTable:
    def __init__(self) -> None:
        self._by_key: dict[CkKey, Checkpoint] = {}
        self._seq = itertools.count()
        #: (deadline ms, seq, key); entries of removed checkpoints are
        #: dropped when they come up (lazy deletion)
        self._deadlines: list[tuple[int, int, CkKey]] = []
        #: (revive log offset, seq, key), lazily deleted the same way
        self._log_offsets: list[tuple[int, int, CkKey]] = []
        self._by_queue: dict[QueueKey, set[CkKey]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Checkpoint]:
        return iter(list(self._by_key.values()))

    def get(self, key: CkKey) -> Checkpoint | None:
        return self._by_key.get(key)

    def add(self, ck: Checkpoint) -> None:
        k = ck.key
        self.remove(k)
        self._by_key[k] = ck
        seq = next(self._seq)
        heapq.heappush(self._deadlines, (ck.deadline_ms, seq, k))
        heapq.heappush(self._log_offsets, (ck.log_offset, seq, k))
        self._by_queue.setdefault((k.group, k.topic, k.queue_id), set()).add(k)

    def remove(self, key: CkKey) -> Checkpoint | None:
        ck = self._by_key.pop(key, None)
        if ck is not None:
            q = (key.group, key.topic, key.queue_id)
            keys = self._by_queue.get(q)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_queue[q]
        return ck

    def _live(self, heap: list[tuple[int, int, CkKey]], value: int, key: CkKey) -> bool:
        ck = self._by_key.get(key)
        if ck is None:
            return False
        current = ck.deadline_ms if heap is self._deadlines else ck.log_offset
        return current == value

    def due(self, now_ms: int) -> list[Checkpoint]:
        """The checkpoints whose deadline passed (they stay in the table)."""
        out = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(heap)
            if self._live(heap, deadline, key):
                ck = self._by_key[key]
                out.append(ck)
        return out

    def queue(self, group: str, topic: str, queue_id: int) -> set[CkKey]:
        """The keys out of one queue for a group."""
        return self._by_queue.get((group, topic, queue_id), set())

    def min_log_offset(self) -> int | None:
        heap = self._log_offsets
        while heap:
            offset, _, key = heap[0]
            if self._live(heap, offset, key):
                return offset
            heapq.heappop(heap)
        return None
