"""The proxy's one error: a 5.x status code and its message."""

from __future__ import annotations


class ProxyError(Exception):
    """A request the proxy answers with a Status other than OK (the gRPC
    call itself succeeds, as RocketMQ's proxy answers)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
