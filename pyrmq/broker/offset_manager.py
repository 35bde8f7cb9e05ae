"""ConsumerOffsetManager: committed consume offsets per (topic, group,
queue), persisted to <store>/config/consumerOffset.json every
flushConsumerOffsetInterval and at shutdown."""

from __future__ import annotations

from typing import Any

from pyrmq.common.config_file import JsonStateFile


class ConsumerOffsetManager:
    """Offsets keyed "topic@group" -> {queue_id: offset}, as RocketMQ keeps
    them (consumerOffset.json has the same shape)."""

    def __init__(self, path: str) -> None:
        self._file = JsonStateFile(path, self._snapshot)
        self.dirty = False
        self.table: dict[str, dict[int, int]] = self._file.load(self._parse) or {}

    @staticmethod
    def _parse(data: dict[str, Any]) -> dict[str, dict[int, int]]:
        return {
            str(key): {int(q): int(o) for q, o in queues.items()}
            for key, queues in (data.get("offsetTable") or {}).items()
        }

    def _snapshot(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                k: {str(q): o for q, o in sorted(v.items())} for k, v in self.table.items()
            }
        }

    def snapshot(self) -> dict[str, Any]:
        """The table as consumerOffset.json holds it (GET_ALL_CONSUMER_OFFSET)."""
        return self._snapshot()

    def take_larger(self, offset_table: dict[str, Any]) -> int:
        """Merge another replica's offsetTable ("topic@group" -> {queue:
        offset}, as GET_ALL_CONSUMER_OFFSET answers), queue by queue, to the
        larger offset; how many offsets moved. Commits made on a slave while
        its master was away must survive either way round."""
        taken = 0
        for key, queues in offset_table.items():
            topic, sep, group = str(key).partition("@")
            if not sep:
                continue
            for qid, off in queues.items():
                if int(off) > self.query_offset(group, topic, int(qid)):
                    self.commit_offset(group, topic, int(qid), int(off))
                    taken += 1
        return taken

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.table.setdefault(f"{topic}@{group}", {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def which_topic_by_consumer(self, group: str) -> set[str]:
        """Topics the group has offsets of."""
        return {t for t, _, g in (k.partition("@") for k in self.table) if g == group}

    def which_group_by_topic(self, topic: str) -> set[str]:
        """Groups with offsets of the topic."""
        return {g for t, _, g in (k.partition("@") for k in self.table) if t == topic}

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> None:
        """dest_group takes src_group's offsets of topic (CLONE_GROUP_OFFSET)."""
        queues = self.table.get(f"{topic}@{src_group}")
        if queues is not None:
            self.table[f"{topic}@{dest_group}"] = dict(queues)
            self.dirty = True

    def remove_group(self, group: str) -> None:
        for k in [k for k in self.table if k.partition("@")[2] == group]:
            del self.table[k]
            self.dirty = True

    def remove_topic(self, topic: str) -> None:
        for k in [k for k in self.table if k.split("@", 1)[0] == topic]:
            del self.table[k]
            self.dirty = True

    async def persist(self) -> None:
        if self.dirty:
            self.dirty = False
            await self._file.persist()

    def persist_now(self) -> None:
        self._file.persist_now()
        self.dirty = False
