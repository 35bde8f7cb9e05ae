"""Where consumers keep their consumed offsets (OffsetStore).

RemoteBrokerOffsetStore (clustering): offsets live in the broker
(QUERY/UPDATE_CONSUMER_OFFSET); the consumer keeps the latest in memory and
commits them every persist interval and at shutdown.
LocalFileOffsetStore (broadcasting): every consumer has its own offsets,
kept in a JSON file {"offsetTable": {"topic@broker@queueId": offset}}, written
atomically (temporary file + rename) off the event loop."""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Iterable
from typing import Protocol

from pyrmq.client.instance import ClientInstance
from pyrmq.common.config_file import read_json, write_json_atomic
from pyrmq.common.errors import RMQError
from pyrmq.common.message import MessageQueue

log = logging.getLogger("pyrmq.consumer")


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = 0
    READ_FROM_STORE = 1
    MEMORY_FIRST_THEN_STORE = 2


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        """The offset, or -1 when there is none (-2 when the store failed)."""

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue, oneway: bool = False) -> None:
        """Commit mq's offset; `oneway`: do not wait for the store's answer."""

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def memory_offset(self, mq: MessageQueue) -> int:
        """The offset held in memory for mq, -1 when none (no I/O)."""

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        old = self.offset_table.get(mq)
        if old is None or not increase_only or offset > old:
            self.offset_table[mq] = offset

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)

    def memory_offset(self, mq: MessageQueue) -> int:
        return self.offset_table.get(mq, -1)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {
            mq: off for mq, off in self.offset_table.items() if topic is None or mq.topic == topic
        }


class RemoteBrokerOffsetStore(_MemoryTable):
    def __init__(self, client: ClientInstance, group: str) -> None:
        super().__init__()
        self.client = client
        self.group = group

    async def load(self) -> None:
        return None

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ is not ReadOffsetType.READ_FROM_STORE:
            off = self.offset_table.get(mq)
            if off is not None or type_ is ReadOffsetType.READ_FROM_MEMORY:
                return off if off is not None else -1
        addr = await self.client.find_broker_addr_or_refresh(
            mq.broker_name, mq.topic, only_master=False
        )
        if addr is None:
            return -2
        try:
            off = await self.client.api.query_consumer_offset(addr, self.group, mq)
        except RMQError as e:
            log.warning("%s: offset of %s not read: %s", self.group, mq, e)
            return -2
        if off is None:
            return -1
        self.update_offset(mq, off, False)
        return off

    async def persist(self, mq: MessageQueue, oneway: bool = False) -> None:
        off = self.offset_table.get(mq)
        if off is None:
            return
        addr = await self.client.find_broker_addr_or_refresh(
            mq.broker_name, mq.topic, only_master=False
        )
        if addr is None:
            log.warning("%s: offset of %s not committed: broker not found", self.group, mq)
            return
        await self.client.api.update_consumer_offset(addr, self.group, mq, off, oneway=oneway)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        results = await asyncio.gather(
            *(self.persist(mq) for mq in mqs if mq in self.offset_table), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                log.warning("%s: offset commit failed: %s", self.group, r)


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in `path` (default
    ~/.rocketmq_offsets/<client ip>@<instance name>/<group>/offsets.json)."""

    def __init__(self, path: str, group: str) -> None:
        super().__init__()
        self.path = path
        self.group = group

    @staticmethod
    def default_path(client_ip: str, instance_name: str, group: str) -> str:
        root = os.environ.get(
            "PYRMQ_OFFSET_STORE_DIR", os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")
        )
        return os.path.join(root, f"{client_ip}@{instance_name}", group, "offsets.json")

    async def load(self) -> None:
        data = await asyncio.to_thread(read_json, self.path)
        if data is None:
            return
        table = data.get("offsetTable") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            log.warning("%s: ignoring malformed offset file %s", self.group, self.path)
            return
        for key, off in table.items():
            topic, broker, qid = [*str(key).rsplit("@", 2), "", ""][:3]
            if qid.lstrip("-").isdigit() and isinstance(off, int):
                self.offset_table[MessageQueue(topic, broker, int(qid))] = off

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ is ReadOffsetType.READ_FROM_STORE:
            fresh = LocalFileOffsetStore(self.path, self.group)
            await fresh.load()
            off = fresh.offset_table.get(mq)
            if off is not None:
                self.update_offset(mq, off, False)
            return off if off is not None else -1
        off = self.offset_table.get(mq)
        return off if off is not None else -1

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        keep = set(mqs)
        table = {
            f"{mq.topic}@{mq.broker_name}@{mq.queue_id}": off
            for mq, off in sorted(self.offset_table.items())
            if mq in keep
        }
        if not table:
            return
        await asyncio.to_thread(write_json_atomic, self.path, {"offsetTable": table})

    async def persist(self, mq: MessageQueue, oneway: bool = False) -> None:
        await self.persist_all(list(self.offset_table))
