"""Which queues of a topic each consumer of a group pulls from: the strategies of
RocketMQ 4.x's ``org.apache.rocketmq.client.consumer.rebalance`` package.

Every consumer of a group runs the same strategy on the same inputs (all queues
of the topic, all client ids of the group) and keeps its own share, so the
shares only partition the queues if every consumer computes exactly the same
thing. Three rules make that hold here:

* **Canonical input.** ``allocate`` deduplicates and sorts ``mq_all`` and
  ``cid_all`` itself (Java leaves the sort to RebalanceImpl). The order is
  Java's ``compareTo`` (strings by UTF-16 code unit, then queue id), so a
  pyrmq consumer and a Java consumer in one group agree.
* **Same arithmetic as Java.** Each strategy reproduces its Java counterpart's
  split (where the remainder goes, how the ring hashes), again so mixed groups
  agree.
* **No share for strangers.** A ``current_cid`` missing from ``cid_all`` (its
  heartbeat has not reached the broker yet) gets nothing, with a warning, and
  empty inputs give nothing; Java throws on the latter, but a rebalance that
  finds no queues or no consumers simply has nothing to do.

Subclasses implement ``_allocate``, which receives the canonical input."""

from __future__ import annotations

import abc
import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from pyrmq.common.message import MessageQueue

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "CallableMachineRoomResolver",
    "MachineRoomResolver",
    "strategy_by_name",
]

log = logging.getLogger("pyrmq.consumer")


def _java_string_key(s: str) -> bytes:
    """Sort key reproducing Java's String.compareTo: comparing UTF-16BE bytes
    compares UTF-16 code units, which is what Java does (Python compares code
    points; the two differ only around surrogate pairs)."""
    return s.encode("utf-16-be", "surrogatepass")


def _mq_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    """Java MessageQueue.compareTo: topic, then broker name, then queue id."""
    return _java_string_key(mq.topic), _java_string_key(mq.broker_name), mq.queue_id


def _canonical_queues(mqs: Iterable[MessageQueue]) -> list[MessageQueue]:
    return sorted(set(mqs), key=_mq_key)


class AllocateMessageQueueStrategy(abc.ABC):
    """A queue allocation strategy (Java AllocateMessageQueueStrategy).

    ``name`` is Java's ``getName()``, the short name users configure."""

    name: ClassVar[str]

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues `current_cid` should consume, in queue order. The result
        depends only on the *sets* of queues and client ids, never their order."""
        mqs = _canonical_queues(mq_all)
        cids = sorted(set(cid_all), key=_java_string_key)
        if not current_cid or not mqs or not cids:
            return []
        if current_cid not in cids:
            log.warning(
                "allocate %s: consumer %r of group %r is not among %d consumers %s; "
                "allocating nothing",
                self.name,
                current_cid,
                consumer_group,
                len(cids),
                cids,
            )
            return []
        return self._allocate(consumer_group, current_cid, mqs, cids)

    @abc.abstractmethod
    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        """Allocate from canonical input: both lists deduplicated and sorted in
        Java order, neither empty, and `current_cid` in `cid_all`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateMessageQueueAveragely(AllocateMessageQueueStrategy):
    """Contiguous blocks (Java AllocateMessageQueueAveragely): consumer i of m
    takes the i-th block of the sorted queues; the first ``n % m`` consumers
    take one queue more. With more consumers than queues the surplus
    consumers get nothing."""

    name = "AVG"

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        index = cid_all.index(current_cid)
        base, extra = divmod(len(mq_all), len(cid_all))
        size = base + (1 if index < extra else 0)
        start = index * base + min(index, extra)
        return mq_all[start : start + size]


class AllocateMessageQueueAveragelyByCircle(AllocateMessageQueueStrategy):
    """Round robin (Java AllocateMessageQueueAveragelyByCircle): consumer i of m
    takes queues i, i + m, i + 2m, ... of the sorted queues."""

    name = "AVG_BY_CIRCLE"

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        return mq_all[cid_all.index(current_cid) :: len(cid_all)]


class AllocateMessageQueueByConfig(AllocateMessageQueueStrategy):
    """A fixed list of queues, whatever the topic's queues and the group's
    consumers (Java AllocateMessageQueueByConfig). Each consumer is configured
    with its own list; keeping those lists disjoint is the user's job."""

    name = "CONFIG"

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues: tuple[MessageQueue, ...] = tuple(_canonical_queues(message_queues))

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        return list(self.message_queues)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.message_queues)!r})"


def _idc_of(broker_name: str) -> str | None:
    """The machine room of a broker named ``"<idc>@<name>"``, or None. Mirrors
    Java's ``brokerName.split("@")`` having exactly two parts (Java's split
    drops trailing empty strings, so ``"idc@"`` has no room)."""
    parts = broker_name.split("@")
    while parts and not parts[-1]:
        parts.pop()
    return parts[0] if len(parts) == 2 else None


class AllocateMessageQueueByMachineRoom(AllocateMessageQueueStrategy):
    """Only queues of brokers in this consumer's machine rooms (Java
    AllocateMessageQueueByMachineRoom, e.g. Alipay's logical rooms). A broker's
    room is the part of its name before ``@`` (``"hz1@broker-a"``); queues of
    brokers in other rooms, or without a room, are not allocated at all.

    The selected queues are split as Java does: consumer i of m takes the
    contiguous block ``[i*q, (i+1)*q)`` with ``q = n // m``, and consumers
    ``i < n % m`` also take queue ``m*q + i`` from the tail."""

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs: frozenset[str] = frozenset(consumer_idcs)

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        in_rooms = [mq for mq in mq_all if _idc_of(mq.broker_name) in self.consumer_idcs]
        index = cid_all.index(current_cid)
        per, rest = divmod(len(in_rooms), len(cid_all))
        result = in_rooms[index * per : (index + 1) * per]
        if index < rest:
            result.append(in_rooms[per * len(cid_all) + index])
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({sorted(self.consumer_idcs)!r})"


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Where brokers and consumers are deployed (Java
    AllocateMachineRoomNearby.MachineRoomResolver). Both must return a
    non-empty room name."""

    def broker_deploy_in(self, message_queue: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class CallableMachineRoomResolver:
    """A MachineRoomResolver made of two functions, e.g.
    ``CallableMachineRoomResolver(lambda mq: mq.broker_name.split("-")[0],
    lambda cid: cid.split("@")[0])``."""

    def __init__(
        self,
        broker_deploy_in: Callable[[MessageQueue], str],
        consumer_deploy_in: Callable[[str], str],
    ) -> None:
        self._broker_deploy_in = broker_deploy_in
        self._consumer_deploy_in = consumer_deploy_in

    def broker_deploy_in(self, message_queue: MessageQueue) -> str:
        return self._broker_deploy_in(message_queue)

    def consumer_deploy_in(self, client_id: str) -> str:
        return self._consumer_deploy_in(client_id)


class AllocateMachineRoomNearby(AllocateMessageQueueStrategy):
    """Prefer consumers in the broker's own machine room (Java
    AllocateMachineRoomNearby). Queues of a room that has live consumers go
    only to those consumers; queues of a room with no consumer are shared by
    every consumer of the group. Both splits use `allocate_strategy`.

    Java's ``getName()`` is ``"MACHINE_ROOM_NEARBY-" + inner name``; that full
    name is `full_name` here, and ``strategy_by_name`` accepts it."""

    name = "MACHINE_ROOM_NEARBY"

    def __init__(
        self,
        allocate_strategy: AllocateMessageQueueStrategy,
        machine_room_resolver: MachineRoomResolver,
    ) -> None:
        if not isinstance(allocate_strategy, AllocateMessageQueueStrategy):
            raise TypeError(
                f"allocate_strategy must be an AllocateMessageQueueStrategy, "
                f"not {type(allocate_strategy).__name__}"
            )
        if not isinstance(machine_room_resolver, MachineRoomResolver):
            raise TypeError(
                "machine_room_resolver needs broker_deploy_in(mq) and "
                "consumer_deploy_in(client_id); CallableMachineRoomResolver wraps two functions"
            )
        self.allocate_strategy = allocate_strategy
        self.machine_room_resolver = machine_room_resolver

    @property
    def full_name(self) -> str:
        """Java's getName(): ``MACHINE_ROOM_NEARBY-<inner strategy name>``."""
        return f"{self.name}-{self.allocate_strategy.name}"

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        resolver = self.machine_room_resolver
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"machine room is empty for message queue {mq!r}")
            queues_by_room.setdefault(room, []).append(mq)
        consumers_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            room = resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"machine room is empty for consumer {cid!r}")
            consumers_by_room.setdefault(room, []).append(cid)

        inner = self.allocate_strategy
        my_room = resolver.consumer_deploy_in(current_cid)
        result: list[MessageQueue] = []
        for room, queues in queues_by_room.items():
            if room == my_room:
                # Queues in my room: shared with the consumers of my room only.
                result += inner.allocate(
                    consumer_group, current_cid, queues, consumers_by_room[room]
                )
            elif room not in consumers_by_room:
                # Nobody lives next to these queues: every consumer shares them.
                result += inner.allocate(consumer_group, current_cid, queues, cid_all)
        return sorted(result, key=_mq_key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.allocate_strategy!r}, {self.machine_room_resolver!r})"


def _md5_hash(key: str) -> int:
    """Java ConsistentHashRouter.MD5Hash: the first 4 bytes of MD5(key) as an
    unsigned big-endian integer (Java's ``key.getBytes()``; UTF-8 here, the
    default charset of every JVM that matters)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _java_mq_string(mq: MessageQueue) -> str:
    """Java MessageQueue.toString(), the key the Java ring routes on."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class _ConsistentHashRing:
    """A hash ring of client ids (Java ConsistentHashRouter). Each client owns
    `virtual_node_count` points hashed from ``"<cid>-<i>"``; a key belongs to
    the owner of the first point at or after its hash, wrapping to the first
    point. On a point collision the later client (in the given order) wins, as
    a put into Java's TreeMap does."""

    def __init__(
        self,
        nodes: Sequence[str],
        virtual_node_count: int,
        hash_func: Callable[[str], int],
    ) -> None:
        self._hash_func = hash_func
        points: dict[int, str] = {}
        for node in nodes:
            for replica in range(virtual_node_count):
                points[hash_func(f"{node}-{replica}")] = node
        self._points = sorted(points)
        self._owners = [points[p] for p in self._points]

    def route_node(self, object_key: str) -> str | None:
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, self._hash_func(object_key))
        return self._owners[i % len(self._owners)]


class AllocateMessageQueueConsistentHash(AllocateMessageQueueStrategy):
    """Consistent hashing (Java AllocateMessageQueueConsistentHash): each queue
    goes to the consumer owning the ring point after the hash of the queue's
    Java ``toString()``. When a consumer joins, only queues that now land on
    its points change owner; the split is less even than AVG's.

    `hash_func` maps a string to an int (Java HashFunction); the default is
    Java's MD5-based one, so a mixed Java/pyrmq group agrees."""

    name = "CONSISTENT_HASH"

    def __init__(
        self,
        virtual_node_count: int = 10,
        hash_func: Callable[[str], int] | None = None,
    ) -> None:
        # Java accepts 0, which builds an empty ring that allocates nothing to
        # anyone: a silent outage, so it is refused here.
        if virtual_node_count < 1:
            raise ValueError(f"virtual_node_count must be >= 1, not {virtual_node_count}")
        self.virtual_node_count = virtual_node_count
        self.hash_func: Callable[[str], int] = hash_func or _md5_hash

    def _allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]:
        ring = _ConsistentHashRing(cid_all, self.virtual_node_count, self.hash_func)
        return [mq for mq in mq_all if ring.route_node(_java_mq_string(mq)) == current_cid]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(virtual_node_count={self.virtual_node_count})"


_STRATEGIES: tuple[type[AllocateMessageQueueStrategy], ...] = (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMachineRoomNearby,
    AllocateMessageQueueConsistentHash,
)
_BY_NAME: dict[str, type[AllocateMessageQueueStrategy]] = {
    key: cls for cls in _STRATEGIES for key in (cls.__name__, cls.name)
}


def strategy_by_name(name: str, **kwargs: Any) -> AllocateMessageQueueStrategy:
    """Build a strategy from its class name (``"AllocateMessageQueueAveragely"``)
    or Java's short name (``"AVG"``); `kwargs` go to its constructor
    (``strategy_by_name("CONFIG", message_queues=[...])``).

    For AllocateMachineRoomNearby, `allocate_strategy` may itself be a name,
    and Java's full name ``"MACHINE_ROOM_NEARBY-AVG"`` names both at once."""
    nearby_prefix = AllocateMachineRoomNearby.name + "-"
    if name.startswith(nearby_prefix) and "allocate_strategy" not in kwargs:
        kwargs["allocate_strategy"] = name[len(nearby_prefix) :]
        name = AllocateMachineRoomNearby.name
    cls = _BY_NAME.get(name)
    if cls is None:
        accepted = ", ".join(f"{c.name} ({c.__name__})" for c in _STRATEGIES)
        raise ValueError(f"unknown allocate strategy {name!r}; accepted names: {accepted}")
    if cls is AllocateMachineRoomNearby and isinstance(kwargs.get("allocate_strategy"), str):
        kwargs["allocate_strategy"] = strategy_by_name(kwargs["allocate_strategy"])
    return cls(**kwargs)
