"""ACL for the 5.x SDKs (aclEnable=true): each gRPC request is checked
against plain_acl.yml before it reaches the broker, with RocketMQ 5's
signature (gRPC metadata ``authorization`` and ``x-mq-date-time``:
pyrmq/acl/signing.py) and the rights a 4.x client would need for the same
work (pyrmq/acl/permission.py):

=================================================  ==========================
RPC                                                rights
=================================================  ==========================
SendMessage, EndTransaction                        the topic: PUB
ReceiveMessage, AckMessage, ChangeInvisible...,    the topic: SUB, the group
ForwardMessageToDeadLetterQueue, QueryAssignment,  (%RETRY%<group>): SUB
PullMessage, UpdateOffset, GetOffset
QueryOffset                                        the topic: SUB
QueryRoute, Heartbeat, Telemetry,                  a known signer only
NotifyClientTermination
=================================================  ==========================

An unknown signer or a wrong signature is UNAUTHORIZED, a missing right
FORBIDDEN, each with the validator's reason. The broker then trusts the
request (its LocalChannel is marked ``acl_checked``)."""

from __future__ import annotations

from typing import Any

from pyrmq.acl.permission import PUB, SUB, retry_topic
from pyrmq.acl.validator import AclAuthenticationError, PlainAccessValidator
from pyrmq.common.errors import NoPermissionError
from pyrmq.proxy.clients import peer_of
from pyrmq.proxy.protocol import pb, status

_CONSUMING = {
    "ReceiveMessage",
    "AckMessage",
    "ChangeInvisibleDuration",
    "ForwardMessageToDeadLetterQueue",
    "QueryAssignment",
    "PullMessage",
    "UpdateOffset",
    "GetOffset",
}


def needed(rpc: str, request: Any) -> dict[str, int]:
    """The rights an RPC needs (resource -> PUB/SUB bits)."""
    if rpc == "SendMessage":
        return {m.topic.name: PUB for m in request.messages}
    if rpc == "EndTransaction":
        return {request.topic.name: PUB}
    if rpc in _CONSUMING:
        topic = request.message_queue.topic.name if hasattr(request, "message_queue") else ""
        topic = topic or request.topic.name
        return {topic: SUB, retry_topic(request.group.name): SUB}
    if rpc == "QueryOffset":
        return {request.message_queue.topic.name: SUB}
    return {}


def check(validator: PlainAccessValidator, rpc: str, request: Any, context: Any) -> Any | None:
    """None when the request may go on, else the Status to answer."""
    metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    try:
        validator.validate_grpc(peer_of(context), metadata, needed(rpc, request), rpc)
    except AclAuthenticationError as e:
        return status(pb.Code.UNAUTHORIZED, e.remark)
    except NoPermissionError as e:
        return status(pb.Code.FORBIDDEN, e.remark)
    return None
