"""The broker's message store: rmqcore's C store plus the asyncio services
around it (flush, allocation, retention)."""

from pyrmq.storage.config import FlushDiskType, MessageStoreConfig
from pyrmq.storage.message_store import MessageStore, PutMessageResult, PutMessageStatus

__all__ = [
    "FlushDiskType",
    "MessageStore",
    "MessageStoreConfig",
    "PutMessageResult",
    "PutMessageStatus",
]
