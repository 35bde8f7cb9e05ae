"""ProcessQueue: the pulled-but-not-yet-consumed messages of one assigned
queue, and the numbers flow control reads (ProcessQueue).

Messages arrive in increasing queue offset (one pull at a time per queue),
so a dict in insertion order is the offset-ordered tree Java keeps: its
first key is the lowest unconsumed offset. The consumed offset to commit is
that key, or the highest offset seen + 1 when nothing is left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from pyrmq.common.message import MessageExt

#: a client treats its broker lock as lost after this long without renewal
REBALANCE_LOCK_MAX_LIVE_TIME = 30.0
#: the pull loop counts a queue as idle after this long without a pull
PULL_MAX_IDLE_TIME = 120.0


class ProcessQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.msg_tree: dict[int, MessageExt] = {}
        #: orderly: messages handed to the listener and not yet committed
        self.consuming_msg_orderly_tree: dict[int, MessageExt] = {}
        self.msg_size = 0
        self.queue_offset_max = -1
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = 0.0
        self.last_pull_timestamp = clock()
        self.last_consume_timestamp = clock()
        self.consuming = False
        #: set whenever messages arrive (the orderly consumer waits on it)
        self.arrived = asyncio.Event()

    # -- arrival and removal ------------------------------------------------------------------

    def put_message(self, msgs: Iterable[MessageExt]) -> int:
        """Add pulled messages; return how many were new."""
        tree = self.msg_tree
        added = 0
        size = 0
        for m in msgs:
            off = m.queue_offset
            if off in tree or off in self.consuming_msg_orderly_tree:
                continue
            tree[off] = m
            added += 1
            size += len(m.body)
            if off > self.queue_offset_max:
                self.queue_offset_max = off
        self.msg_size += size
        if added:
            self.arrived.set()
        return added

    def remove_message(self, msgs: Iterable[MessageExt]) -> int:
        """Remove consumed messages; return the offset to commit (-1 when
        the queue was empty already)."""
        tree = self.msg_tree
        if not tree:
            return -1
        size = 0
        for m in msgs:
            if tree.pop(m.queue_offset, None) is not None:
                size += len(m.body)
        self.msg_size -= size
        self.last_consume_timestamp = self.clock()
        if tree:
            return next(iter(tree))
        return self.queue_offset_max + 1

    @property
    def msg_count(self) -> int:
        """Messages pulled and not yet consumed (being consumed included)."""
        return len(self.msg_tree) + len(self.consuming_msg_orderly_tree)

    @property
    def max_span(self) -> int:
        """Offset distance between the oldest and the newest cached message."""
        tree = self.msg_tree
        if not tree:
            return 0
        return self.queue_offset_max - next(iter(tree))

    def has_temp_message(self) -> bool:
        return bool(self.msg_tree)

    def clear(self) -> None:
        self.msg_tree.clear()
        self.consuming_msg_orderly_tree.clear()
        self.msg_size = 0
        self.queue_offset_max = -1

    # -- orderly -------------------------------------------------------------------------------

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to batch_size of the oldest messages to the consuming tree."""
        out: list[MessageExt] = []
        tree = self.msg_tree
        for off in list(tree)[:batch_size]:
            m = tree.pop(off)
            self.consuming_msg_orderly_tree[off] = m
            out.append(m)
        if not tree:
            self.arrived.clear()
        return out

    def commit(self) -> int:
        """Forget the consuming tree; return the offset to commit (-1 when
        it was empty)."""
        tree = self.consuming_msg_orderly_tree
        if not tree:
            return -1
        last = max(tree)
        self.msg_size -= sum(len(m.body) for m in tree.values())
        tree.clear()
        self.last_consume_timestamp = self.clock()
        return last + 1

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put messages of the consuming tree back in front (orderly retry)."""
        back = {}
        for m in msgs:
            if self.consuming_msg_orderly_tree.pop(m.queue_offset, None) is not None:
                back[m.queue_offset] = m
        if back:
            merged = dict(sorted(back.items()))
            merged.update(self.msg_tree)
            self.msg_tree = merged
            self.arrived.set()

    # -- locks -----------------------------------------------------------------------------------

    def is_lock_expired(self) -> bool:
        return self.clock() - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME

    def is_pull_expired(self) -> bool:
        return self.clock() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME
