"""MessageStoreConfig: RocketMQ's store settings, loadable from broker.conf."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from typing import Any

import rmqcore
from pyrmq.common.config_file import camel_case, settings_from_properties
from pyrmq.common.errors import ClientError


class FlushDiskType(enum.Enum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


@dataclasses.dataclass(frozen=True, slots=True)
class MessageStoreConfig:
    """Store settings (RocketMQ MessageStoreConfig; Java names in snake_case).

    Millisecond settings keep their unit in the name, as in Java."""

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    mapped_file_size_commit_log: int = rmqcore.DEFAULT_COMMIT_LOG_FILE_SIZE
    #: bytes, as in Java: units per file * 20
    mapped_file_size_consume_queue: int = (
        rmqcore.DEFAULT_CQ_UNITS_PER_FILE * rmqcore.CQ_STORE_UNIT_SIZE
    )
    max_message_size: int = rmqcore.DEFAULT_MAX_MESSAGE_SIZE
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    sync_flush_timeout_ms: int = 5000
    #: SYNC_FLUSH: once the oldest put still waiting for its flush has waited
    #: this long, the disk is not keeping up and the broker answers new sends
    #: SYSTEM_BUSY (pyrmq's reading of RocketMQ's "page cache busy": there is
    #: no put lock held across a flush here)
    os_page_cache_busy_time_out_mills: int = 1000
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    #: hours
    file_reserved_time: int = 72
    #: hours of the day (";"-separated) when expired files are deleted
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    #: past diskSpaceCleanForciblyRatio (or the warning level), delete the
    #: oldest CommitLog segments even when they have not expired
    clean_file_forcibly_enable: bool = True
    #: percent: past this the store refuses puts (SERVICE_NOT_AVAILABLE at
    #: the broker) until retention or somebody brings the disk back to at
    #: most diskSpaceCleanForciblyRatio; keeps the last part of the disk for
    #: the ConsumeQueue, index and config files of what was accepted
    disk_space_warning_level_ratio: int = 90
    clean_resource_interval_ms: int = 10_000
    delete_commit_log_files_max: int = 10
    message_index_enable: bool = True
    #: pyrmq: build IndexFile entries on the store's index thread (as RocketMQ's
    #: dispatcher thread does) instead of in every put; the puts wake it from C
    #: (csrc/index_thread.c) and lookups wait for it to catch up. Measured
    #: here: 2.8x batched and 1.2x single puts (128 B).
    message_index_async: bool = True
    max_hash_slot_num: int = rmqcore.DEFAULT_INDEX_HASH_SLOT_NUM
    max_index_num: int = rmqcore.DEFAULT_INDEX_NUM
    #: pyrmq: queue ids of a topic are 0 .. max_queue_nums - 1
    max_queue_nums: int = 1024
    warm_mapped_file_enable: bool = True
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32

    def __post_init__(self) -> None:
        if self.mapped_file_size_consume_queue % rmqcore.CQ_STORE_UNIT_SIZE:
            raise ClientError(
                f"mappedFileSizeConsumeQueue={self.mapped_file_size_consume_queue} must be a "
                f"multiple of {rmqcore.CQ_STORE_UNIT_SIZE}"
            )
        if self.mapped_file_size_commit_log < 64 * 1024:
            raise ClientError("mappedFileSizeCommitLog must be at least 65536 bytes")
        # A record (body + topic + properties + header) must fit in a segment.
        worst = rmqcore.record_size(self.max_message_size, 127, 32767, 20, 20) + 8
        if worst > self.mapped_file_size_commit_log:
            raise ClientError(
                f"mappedFileSizeCommitLog={self.mapped_file_size_commit_log} cannot hold a "
                f"message of maxMessageSize={self.max_message_size}: use a segment of at "
                f"least {worst} bytes or a smaller maxMessageSize"
            )
        for name in (
            "sync_flush_timeout_ms",
            "os_page_cache_busy_time_out_mills",
            "flush_interval_commit_log_ms",
            "flush_interval_consume_queue_ms",
            "clean_resource_interval_ms",
            "max_queue_nums",
            "max_hash_slot_num",
            "max_index_num",
        ):
            if getattr(self, name) <= 0:
                raise ClientError(f"{camel_case(name)} must be > 0")
        if not 1 <= self.disk_max_used_space_ratio <= 95:
            raise ClientError("diskMaxUsedSpaceRatio must be within 1..95")
        if not 1 <= self.disk_space_warning_level_ratio <= 100:
            raise ClientError("diskSpaceWarningLevelRatio must be within 1..100")

    @property
    def cq_units_per_file(self) -> int:
        return self.mapped_file_size_consume_queue // rmqcore.CQ_STORE_UNIT_SIZE

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> MessageStoreConfig:
        """Build from broker.conf-style properties; takes Java camelCase or
        snake_case keys and ignores keys that are not store settings."""
        return cls(**settings_from_properties(cls, props, converters=_CONVERTERS))


def _flush_disk_type(raw: Any) -> FlushDiskType:
    return raw if isinstance(raw, FlushDiskType) else FlushDiskType(str(raw).strip())


_CONVERTERS = {"FlushDiskType": _flush_disk_type}
