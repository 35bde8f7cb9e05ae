"""The proxy's one error: a 5.x status code and its message; and the 4.x
response codes of the brokers as the 5.x codes a client gets (RocketMQ 5
proxy's ResponseCode -> Code mapping)."""

from __future__ import annotations

from pyrmq.common.errors import BrokerError
from pyrmq.proxy.protocol import pb
from pyrmq.remoting import RemotingCommand, ResponseCode


class ProxyError(Exception):
    """A request the proxy answers with a Status other than OK (the gRPC
    call itself succeeds, as RocketMQ's proxy answers)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_CODES: dict[int, int] = {
    ResponseCode.SUCCESS: pb.Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.Code.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: pb.Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: pb.Code.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: pb.Code.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.Code.PROXY_TIMEOUT,
    ResponseCode.QUERY_NOT_FOUND: pb.Code.OFFSET_NOT_FOUND,
    ResponseCode.NO_MESSAGE: pb.Code.INVALID_RECEIPT_HANDLE,
}


def code_of(code: int) -> int:
    """The 5.x code of a broker's response code."""
    return _CODES.get(code, pb.Code.INTERNAL_SERVER_ERROR)


def refused(resp: RemotingCommand, what: str) -> ProxyError:
    """A broker's non-success answer as the client's error."""
    return ProxyError(code_of(resp.code), f"{what}: {resp.remark or f'response code {resp.code}'}")


def from_broker(e: BrokerError, what: str) -> ProxyError:
    """A BrokerError MQClientAPI raised, as the client's error."""
    return ProxyError(code_of(e.code), f"{what}: {e.remark}")
