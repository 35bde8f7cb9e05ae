"""RocketMQ's remoting protocol: frame codec, connections, server, client."""

from pyrmq.remoting.client import RemotingClient, split_addr
from pyrmq.remoting.codes import RequestCode, ResponseCode
from pyrmq.remoting.command import FrameError, RemotingCommand
from pyrmq.remoting.connection import Connection
from pyrmq.remoting.server import RemotingServer
from pyrmq.remoting.tls import TlsConfig, TlsMode, client_ssl_context

__all__ = [
    "Connection",
    "FrameError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingServer",
    "RequestCode",
    "ResponseCode",
    "TlsConfig",
    "TlsMode",
    "client_ssl_context",
    "split_addr",
]
