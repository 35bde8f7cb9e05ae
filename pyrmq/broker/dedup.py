"""DuplicateDetector: exactly-once produce (pyrmq's, beyond RocketMQ).

With ``duplicateDetection=true``, a send whose UNIQ_KEY this broker already
stored in the same topic within ``duplicateDetectionWindowSeconds`` (120)
is answered with the first send's result (its offset id, queue and queue
offset, once durable as the first would have been) and not stored again.
That is what a producer's retry after a lost answer looks like (a broker
killed between storing and answering, a connection cut): Java's, the C++
and pyrmq's clients keep a message's UNIQ_KEY across retries, and make it
from the producer's address, process and a counter, so two producers never
make the same one.

The window is the store's own IndexFiles, which index every UNIQ_KEY by
topic: a lookup is a hash probe in C, each candidate checked against its
CommitLog record. With detection on, the broker indexes each message as it
is stored (``messageIndexAsync`` off), and at start-up, before it takes a
send, indexes the CommitLog tail recovery left unindexed; the IndexFiles
are themselves rebuilt from the CommitLog by recovery, so the window is
the CommitLog's. Single messages are checked; a batch's are not (yet)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker")

_UNIQ = "UNIQ_KEY\x01"


def uniq_key_of(props: str) -> str:
    """The UNIQ_KEY in a properties string ("" when none); no full decode."""
    at = props.find(_UNIQ)
    if at < 0 or (at > 0 and props[at - 1] != "\x02"):
        return ""
    start = at + len(_UNIQ)
    end = props.find("\x02", start)
    return props[start : end if end >= 0 else len(props)]


class DuplicateDetector:
    def __init__(
        self, store: MessageStore, window_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.window_ms = int(window_s * 1000)
        self._clock = clock
        #: sends answered as duplicates (runtime info)
        self.duplicates = 0

    async def start(self) -> None:
        """Index the CommitLog tail before the first send is checked."""
        await self.store.catch_up_index()

    def stored(self, topic: str, props: str) -> dict[str, Any] | None:
        """The record a send with these properties already stored in topic
        within the window, or None (also when it has no UNIQ_KEY)."""
        key = uniq_key_of(props)
        if not key:
            return None
        since = int(self._clock() * 1000) - self.window_ms
        for offset in self.store.find_key(topic, key, since):
            m = self.store.look_message_by_offset(offset)
            # the index also holds KEYS items: the match must be the UNIQ_KEY
            if uniq_key_of(m["properties"].decode("utf-8", "replace")) == key:
                self.duplicates += 1
                return m
        return None
