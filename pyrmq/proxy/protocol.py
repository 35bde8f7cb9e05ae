"""RocketMQ 5's gRPC protocol, compiled from ``v2/messaging.proto`` on first
import (grpc_tools, through ``grpc.protos_and_services``: about 40 ms, once
per process; nothing generated is kept in the repository).

``pb`` holds the messages and enums (``pb.SendMessageRequest``,
``pb.Code.OK``...); ``services`` the service glue
(``services.add_MessagingServiceServicer_to_server``). The helpers here
turn protobuf's Duration and Timestamp into milliseconds and back, and build
the Status every answer carries."""

from __future__ import annotations

import os
import sys
from typing import Any

import grpc

_PROTO = "pyrmq/proxy/v2/messaging.proto"


def _compile() -> tuple[Any, Any]:
    # protos_and_services resolves the path against sys.path: the folder
    # that holds the pyrmq package must be on it (it is, pyrmq was imported
    # from there)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:
        sys.path.append(root)
    return grpc.protos_and_services(_PROTO)


pb, services = _compile()

#: the full name of the service (gRPC method paths start with it)
SERVICE = "apache.rocketmq.v2.MessagingService"


def status(code: int, message: str = "") -> Any:
    """A Status; the message defaults to the code's name, as RocketMQ's
    proxy writes it."""
    return pb.Status(code=code, message=message or pb.Code.Name(code))


OK = pb.Code.OK


def duration_ms(d: Any) -> int:
    """A google.protobuf.Duration in milliseconds."""
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def timestamp_ms(t: Any) -> int:
    """A google.protobuf.Timestamp in milliseconds since the epoch."""
    return int(t.seconds) * 1000 + int(t.nanos) // 1_000_000


def set_timestamp_ms(t: Any, ms: int) -> None:
    t.seconds, t.nanos = divmod(ms, 1000)
    t.nanos *= 1_000_000


def set_duration_ms(d: Any, ms: int) -> None:
    d.seconds, rest = divmod(ms, 1000)
    d.nanos = rest * 1_000_000
