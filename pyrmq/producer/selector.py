"""Queue selectors for `Producer.send(msg, selector=..., arg=...)`
(MessageQueueSelector and its implementations).

A selector is any callable `(mqs, msg, arg) -> MessageQueue`; mqs are the
topic's writable queues in route order. SelectMessageQueueByHash keeps every
message with the same sharding key in one queue (FIFO per key) as long as
the queue count does not change."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

import rmqcore
from pyrmq.common.message import Message, MessageQueue


class MessageQueueSelector(Protocol):
    def __call__(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue: ...


class SelectMessageQueueByHash:
    """Queue `abs(hash(arg)) % len(mqs)`, with Java's String.hashCode for
    strings (so a Java producer with the same key picks the same queue) and
    the value itself for ints."""

    def __call__(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        if not mqs:
            raise ValueError("the topic has no writable queue")
        if isinstance(arg, int):
            h = arg
        elif isinstance(arg, (str, bytes)):
            h = rmqcore.java_hash(arg)
        else:
            h = rmqcore.java_hash(str(arg))
        return mqs[abs(h) % len(mqs)]


class SelectMessageQueueByRandom:
    def __call__(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        if not mqs:
            raise ValueError("the topic has no writable queue")
        return random.choice(mqs)
