"""The broker's message store: rmqcore's C store plus the asyncio services
around it (flush, allocation, retention)."""

from pyrmq.store.config import FlushDiskType, MessageStoreConfig
from pyrmq.store.message_store import MessageStore, PutMessageResult, PutMessageStatus

__all__ = [
    "FlushDiskType",
    "MessageStore",
    "MessageStoreConfig",
    "PutMessageResult",
    "PutMessageStatus",
]
