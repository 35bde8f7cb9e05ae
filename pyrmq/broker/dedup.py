"""DuplicateDetector: exactly-once produce (pyrmq's, beyond RocketMQ).

With ``duplicateDetection=true``, a send whose key this broker already
stored in the same topic within ``duplicateDetectionWindowSeconds`` (120)
is answered with the first send's result (its offset id, queue and queue
offset, once durable as the first would have been) and not stored again.
That is what a producer's retry after a lost answer looks like (a broker
killed between storing and answering, a connection cut).

The key (``duplicateDetectionKey``):

- ``UNIQ_KEY`` (default): the client-made message id. Java's and pyrmq's
  clients keep it across a message's retries and make it from the
  producer's address, process and a counter, so two producers never make
  the same one.
- ``KEYS``: the message's KEYS (all of them, as sent), or its UNIQ_KEY when
  it has none. For clients that make a new UNIQ_KEY for every attempt, as
  RocketMQ's C++ client 0.4.4 (PyPI ``rocketmq``) does: the application
  gives each message keys of its own (an order id), which RocketMQ advises
  anyway for consumers to deduplicate on.

The window is the store's own IndexFiles, which index every UNIQ_KEY and
KEYS item by topic: a lookup is a hash probe in C (the GIL released), each
candidate checked against its CommitLog record. The index thread indexes a
message a moment after it is stored; the sends this broker stored since
the index last caught up are kept in memory (topic and key to CommitLog
offset) and forgotten once indexed. At start-up, before the first send is
checked, the CommitLog tail recovery left unindexed is indexed; the
IndexFiles are themselves rebuilt from the CommitLog by recovery, so the
window is the CommitLog's.

A batch is stored whole or not at all, so a batch is a duplicate when its
first message was stored within the window and the records that follow it
in the CommitLog are the batch's other messages, key for key (a retried
batch is the same bytes): it is answered with the stored batch's ids and
not stored again. A batch whose first key matches but whose other messages
differ is not a retry and is stored."""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.storage import MessageStore

KEY_MODES = ("UNIQ_KEY", "KEYS")
_ENTRY = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLEN
_PROPS_LEN = struct.Struct(">h")


def batch_properties(body: bytes, limit: int = 100_000) -> list[str] | None:
    """The properties of each message of a batch body (rmq_format.h section
    4), or None when it does not read as one (the store then refuses it)."""
    out: list[str] = []
    pos, end = 0, len(body)
    for _ in range(limit):
        if pos == end:
            return out
        if end - pos < _ENTRY.size + _PROPS_LEN.size:
            return None
        total, _, _, _, body_len = _ENTRY.unpack_from(body, pos)
        at = pos + _ENTRY.size + body_len
        if body_len < 0 or total < _ENTRY.size + 2 or at + 2 > end:
            return None
        (props_len,) = _PROPS_LEN.unpack_from(body, at)
        if props_len < 0 or at + 2 + props_len > end:
            return None
        out.append(body[at + 2 : at + 2 + props_len].decode("utf-8", "replace"))
        pos = at + 2 + props_len
    return None


def prop_of(props: str, name: str) -> str:
    """One property of a properties string ("" when absent), without
    decoding the rest."""
    tag = name + "\x01"
    at = props.find(tag)
    while at > 0 and props[at - 1] != "\x02":
        at = props.find(tag, at + 1)
    if at < 0:
        return ""
    start = at + len(tag)
    end = props.find("\x02", start)
    return props[start : end if end >= 0 else len(props)]


class DuplicateDetector:
    def __init__(
        self,
        store: MessageStore,
        window_s: float,
        key_mode: str = "UNIQ_KEY",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if key_mode not in KEY_MODES:
            raise ValueError(f"duplicateDetectionKey={key_mode!r}: expected UNIQ_KEY or KEYS")
        self.store = store
        self.window_ms = int(window_s * 1000)
        self.by_keys = key_mode == "KEYS"
        self._clock = clock
        #: (topic, key) -> CommitLog offset, of sends not indexed yet
        self._recent: dict[tuple[str, str], int] = {}
        #: (record end, (topic, key)) in store order, to forget them once indexed
        self._order: deque[tuple[int, tuple[str, str]]] = deque()
        #: sends answered as duplicates (runtime info)
        self.duplicates = 0

    async def start(self) -> None:
        """Index the CommitLog tail before the first send is checked."""
        await self.store.catch_up_index()

    def key_of(self, props: str) -> str:
        """What identifies a message with these properties ("" : nothing)."""
        if self.by_keys:
            keys = prop_of(props, "KEYS")
            if keys.strip():
                return "KEYS\x01" + keys
        return prop_of(props, "UNIQ_KEY")

    def stored(self, topic: str, props: str) -> dict[str, Any] | None:
        """The record a send with these properties already stored in topic
        within the window, or None (also when it has no key)."""
        key = self.key_of(props)
        if not key:
            return None
        self._forget_indexed()
        since = int(self._clock() * 1000) - self.window_ms
        recent = self._recent.get((topic, key))
        if recent is not None:
            offsets = [recent]
        else:
            # the index holds each KEYS item and the UNIQ_KEY: probe with one
            probe = key[5:].split()[0] if key.startswith("KEYS\x01") else key
            offsets = self.store.find_key(topic, probe, since)
        for offset in offsets:
            m = self.store.look_message_by_offset(offset)
            found = self.key_of(m["properties"].decode("utf-8", "replace"))
            if m["store_timestamp"] >= since and found == key:
                self.duplicates += 1
                return m
        return None

    def stored_batch(self, topic: str, props: list[str]) -> tuple[dict[str, Any], int] | None:
        """(the first record, the bytes of all) of a batch with these
        messages' properties stored in topic within the window, or None."""
        if not props:
            return None
        first = self.stored(topic, props[0])
        if first is None:
            return None
        offset = first["commit_log_offset"]
        for p in props:
            try:
                m = self.store.look_message_by_offset(offset)
            except Exception:  # past the end, or another kind of record
                return None
            found = self.key_of(m["properties"].decode("utf-8", "replace"))
            if m["topic"] != topic or not found or found != self.key_of(p):
                self.duplicates -= 1  # counted by stored(): not a retry after all
                return None
            offset += m["store_size"]
        return first, offset - first["commit_log_offset"]

    def remember(self, topic: str, props: str, r: rmqcore.AppendResult) -> None:
        """A send just stored: found by `stored` until the index has it."""
        key = self.key_of(props)
        if key:
            k = (topic, key)
            self._recent[k] = r.phys_offset
            self._order.append((r.phys_offset + r.wrote_bytes, k))

    def _forget_indexed(self) -> None:
        order, recent = self._order, self._recent
        if not order:
            return
        indexed = self.store.index_dispatched
        while order and order[0][0] <= indexed:
            end, k = order.popleft()
            if recent.get(k, end) < end:  # not a later send of the same key
                del recent[k]
