"""The pyrmq exception hierarchy (STYLE.md section 4).

Store errors are raised by rmqcore's wrappers; each carries the C status code
(`code`, one of csrc/rmq_errors.h's RMQ_E* or a negative errno)."""

from __future__ import annotations


class RMQError(Exception):
    """Base of every pyrmq error."""

    retriable = False


class ClientError(RMQError):
    """Local misuse, bad configuration or wrong state (MQClientException)."""


class RemotingError(RMQError):
    """Transport failure: connect, timeout, overload, bad frame."""


class StoreError(RMQError):
    """A storage failure. `code` is the C core's status code."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class IllegalMessageError(StoreError, ValueError):
    """The message cannot be stored as given (bad topic, too large, bad queue
    id, malformed batch). Nothing was written."""


class DiskFullError(StoreError):
    """The disk has no room; nothing was written."""

    retriable = True


class CorruptStoreError(StoreError):
    """A record or file failed validation."""


class NotAStoreError(StoreError):
    """The directory holds files that are not a pyrmq store."""


class StoreLockedError(StoreError):
    """Another process has the store open."""
