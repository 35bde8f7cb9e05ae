"""SlaveSynchronize: a slave keeps its master's metadata (RocketMQ syncs it
every 10 s; pyrmq every SYNC_INTERVAL and at once when replication
connects): the topic table (GET_ALL_TOPIC_CONFIG), consumer offsets
(GET_ALL_CONSUMER_OFFSET) and delay offsets (GET_ALL_DELAY_OFFSET).

A topic the master deleted loses its ConsumeQueues and consumer offsets on
the slave too, as the master's did: a slave that later becomes master adopts every topic it
holds messages of (TopicConfigManager.adopt_stored), which must not bring
a deleted topic back.

Consumer offsets merge, queue by queue, to the larger of the master's and
the slave's: consumers commit to the slave while the master is away, and
those commits must survive the master's return (the master learns them
when the consumers next commit to it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.schedule import ScheduleMessageService
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.errors import RMQError
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker.ha")

#: seconds between two synchronizations
SYNC_INTERVAL = 3.0


class SlaveSynchronize:
    def __init__(
        self,
        client: RemotingClient,
        master_addr: Callable[[], str],
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        schedule: ScheduleMessageService,
        store: MessageStore,
        *,
        timeout: float = 5.0,
    ) -> None:
        self.client = client
        self.store = store
        self._master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.schedule = schedule
        self.timeout = timeout
        self.syncs = 0
        self._failing = False
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pyrmq:ha:slave-sync")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def sync_soon(self) -> None:
        self._kick.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), SYNC_INTERVAL)
            self._kick.clear()
            addr = self._master_addr()
            if not addr:
                continue
            try:
                await self.sync_all(addr)
                if self._failing:
                    log.info("HA: metadata sync from master %s works again", addr)
                self._failing = False
            except asyncio.CancelledError:
                raise
            except (RMQError, OSError, ValueError, KeyError, TypeError) as e:
                if not self._failing:
                    log.warning("HA: metadata sync from master %s failed: %s", addr, e)
                self._failing = True

    async def _get(self, addr: str, code: RequestCode) -> dict[str, Any]:
        resp = await self.client.invoke(addr, RemotingCommand(code, {}), self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"{code.name}: code {resp.code} {resp.remark}")
        doc = json.loads(resp.body or b"{}")
        if not isinstance(doc, dict):
            raise ValueError(f"{code.name}: the answer is not a JSON object")
        return doc

    async def sync_all(self, addr: str) -> None:
        topics = await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        before = set(self.topics.table)
        if self.topics.replace_all_from_master(topics):
            for gone in sorted(before - set(self.topics.table)):
                # as the master's DELETE_TOPIC_IN_BROKER did (admin.py)
                self.offsets.remove_topic(gone)
                if self.store.delete_topic(gone):
                    log.info("HA: topic %s deleted on the master: its ConsumeQueues too", gone)
        offsets = await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        self.offsets.take_larger(offsets.get("offsetTable") or {})
        delay = await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        self.schedule.replace_offsets(
            {int(k): int(v) for k, v in (delay.get("offsetTable") or {}).items()}
        )
        self.syncs += 1
