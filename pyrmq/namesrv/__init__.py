"""The NameServer: brokers register their topics; clients ask for routes."""

from pyrmq.namesrv.route_info_manager import RouteInfoManager
from pyrmq.namesrv.server import NameServer

__all__ = ["NameServer", "RouteInfoManager"]
