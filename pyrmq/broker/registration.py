"""Registration with the name servers (BrokerOuterAPI): REGISTER_BROKER to
every name server at start, every registerNameServerPeriod, and right after
a topic changes; UNREGISTER_BROKER at shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("pyrmq.broker")


class BrokerOuterAPI:
    def __init__(
        self,
        client: RemotingClient,
        namesrv_addrs: list[str],
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        broker_addr: str,
        ha_server_addr: str,
        topic_wrapper: Callable[[], dict[str, Any]],
        timeout: float = 6.0,
        on_master: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self._fields = {
            "brokerName": broker_name,
            "brokerAddr": broker_addr,
            "clusterName": cluster,
            "haServerAddr": ha_server_addr,
            "brokerId": str(broker_id),
        }
        self._topic_wrapper = topic_wrapper
        #: a slave learns its master from the answer: (masterAddr, haServerAddr)
        self._on_master = on_master
        self.timeout = timeout
        self.registered: dict[str, bool] = {}

    def set_ha_server_addr(self, addr: str) -> None:
        self._fields["haServerAddr"] = addr

    def set_broker_id(self, broker_id: int, master_epoch: int | None = None) -> None:
        """Controller mode: register from now on as brokerId (0 as master),
        with the master epoch that made it so (a name server lets a newer
        master's registration replace an older one that is still alive)."""
        self._fields["brokerId"] = str(broker_id)
        if master_epoch is None:
            self._fields.pop("masterEpoch", None)
        else:
            self._fields["masterEpoch"] = str(master_epoch)

    async def register_all(self) -> int:
        """REGISTER_BROKER to every name server; returns how many accepted
        (none while a broker in controller mode has no role yet)."""
        if self._fields["brokerId"] == "-1":
            return 0
        body = json.dumps(
            {"topicConfigSerializeWrapper": self._topic_wrapper(), "filterServerList": []},
            separators=(",", ":"),
        ).encode()
        fields = dict(
            self._fields, compressed="false", bodyCrc32=str(zlib.crc32(body) & 0x7FFFFFFF)
        )
        results = await asyncio.gather(
            *(self._register_one(a, fields, body) for a in self.namesrv_addrs),
            return_exceptions=True,
        )
        return sum(1 for r in results if r is True)

    async def _register_one(self, addr: str, fields: dict[str, str], body: bytes) -> bool:
        cmd = RemotingCommand(RequestCode.REGISTER_BROKER, dict(fields), body)
        try:
            resp = await self.client.invoke(addr, cmd, self.timeout)
        except Exception as e:
            if self.registered.get(addr, True):
                log.warning("registering with name server %s failed: %s", addr, e)
            self.registered[addr] = False
            return False
        ok = resp.code == ResponseCode.SUCCESS
        if not ok:
            log.error("name server %s refused registration: %s", addr, resp.remark)
        elif self._on_master is not None and resp.ext_fields.get("masterAddr"):
            f = resp.ext_fields
            self._on_master(f.get("masterAddr", ""), f.get("haServerAddr", ""))
        elif not self.registered.get(addr):
            log.info("registered with name server %s", addr)
        self.registered[addr] = ok
        return ok

    async def unregister_all(self) -> None:
        async def one(addr: str) -> None:
            cmd = RemotingCommand(RequestCode.UNREGISTER_BROKER, dict(self._fields))
            try:
                await self.client.invoke(addr, cmd, 3.0)
            except Exception as e:
                log.info("unregistering from %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
