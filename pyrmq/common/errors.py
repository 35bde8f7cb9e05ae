"""The pyrmq exception hierarchy (STYLE.md section 4).

Store errors are raised by rmqcore's wrappers; each carries the C status code
(`code`, one of csrc/rmq_errors.h's RMQ_E* or a negative errno)."""

from __future__ import annotations

from typing import Any, ClassVar


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


class BrokerError(RMQError):
    """A non-success response of a broker or name server; also what a server
    processor raises to answer with `code` and the message as remark.

    Subclasses set `code` (a ResponseCode value) and register themselves;
    BrokerError.for_code(code) finds them (UnknownBrokerError otherwise). A
    subclass of one that does not set its own `code` is a finer kind of the
    same answer and is not registered."""

    code: ClassVar[int] = -1
    _registry: ClassVar[dict[int, type[BrokerError]]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.code >= 0 and "code" in cls.__dict__:
            if cls.code in BrokerError._registry:
                raise TypeError(f"response code {cls.code} registered twice")
            BrokerError._registry[cls.code] = cls

    def __init__(self, remark: str, addr: str | None = None) -> None:
        super().__init__(remark if addr is None else f"{remark} (from {addr})")
        self.remark = remark
        self.addr = addr

    @staticmethod
    def for_code(code: int) -> type[BrokerError]:
        return BrokerError._registry.get(code, UnknownBrokerError)

    @classmethod
    def from_response(cls, code: int, remark: str | None, addr: str | None = None) -> BrokerError:
        err_cls = BrokerError.for_code(code)
        err = err_cls(remark or f"response code {code}", addr)
        if isinstance(err, UnknownBrokerError):
            err.response_code = code
        return err


class UnknownBrokerError(BrokerError):
    """A response code pyrmq has no class for; see `response_code`."""

    response_code = -1


# Codes from RocketMQ's ResponseCode / RemotingSysResponseCode.
class BrokerSystemError(BrokerError):
    code = 1
    retriable = True


class SystemBusyError(BrokerError):
    code = 2
    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    code = 3


class MessageIllegalError(BrokerError):
    code = 13


class ServiceNotAvailableError(BrokerError):
    code = 14
    retriable = True


class NoPermissionError(BrokerError):
    code = 16
    retriable = True


class TopicNotExistError(BrokerError):
    code = 17
    retriable = True


class TopicExistAlreadyError(BrokerError):
    code = 18


class QueryNotFoundError(BrokerError):
    code = 22


class SubscriptionParseFailedError(BrokerError):
    code = 23


class SubscriptionNotExistError(BrokerError):
    code = 24


class SubscriptionNotLatestError(BrokerError):
    code = 25


class SubscriptionGroupNotExistError(BrokerError):
    code = 26


class InvalidParameterError(BrokerError):
    code = 29


class ConsumerNotOnlineError(BrokerError):
    code = 206


class ConsumeMsgTimeoutError(BrokerError):
    """A consumer the broker forwarded a request to did not answer in time."""

    code = 207


class NoMessageError(BrokerError):
    """A POP ack, change of invisible time or dead-lettering whose receipt
    handle names no message out (NO_MESSAGE)."""

    code = 208


class PollingFullError(BrokerError):
    """Too many POP requests held for long polling (POLLING_FULL)."""

    code = 209


# RocketMQ 5 controller mode (ResponseCode 2000-2016).
class ControllerError(BrokerError):
    """Base of the controller's answers (codes 2000-2016)."""


class ControllerFencedMasterEpochError(ControllerError):
    code = 2000


class ControllerFencedSyncStateSetEpochError(ControllerError):
    code = 2001


class ControllerInvalidMasterError(ControllerError):
    code = 2002


class ControllerInvalidReplicasError(ControllerError):
    code = 2003


class ControllerMasterNotAvailableError(ControllerError):
    code = 2004


class ControllerInvalidRequestError(ControllerError):
    code = 2005


class ControllerBrokerNotAliveError(ControllerError):
    code = 2006


class ControllerNotLeaderError(ControllerError):
    """Asked a controller that is not the Raft leader; the client looks for
    the leader and asks again."""

    code = 2007
    retriable = True


class ControllerBrokerMetadataNotExistError(ControllerError):
    code = 2008


class ControllerInvalidCleanBrokerMetadataError(ControllerError):
    code = 2009


class ControllerBrokerNeedToBeRegisteredError(ControllerError):
    code = 2010


class ControllerMasterStillExistError(ControllerError):
    code = 2011


class ControllerElectMasterFailedError(ControllerError):
    code = 2012


class ControllerAlterSyncStateSetFailedError(ControllerError):
    code = 2013


class ControllerBrokerIdInvalidError(ControllerError):
    code = 2014


class ControllerInternalError(ControllerError):
    code = 2015
    retriable = True


class ControllerBrokerLiveInfoNotExistsError(ControllerError):
    code = 2016
