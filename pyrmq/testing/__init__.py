"""Test helpers that run real components: LocalCluster (an in-process
NameServer + Broker on 127.0.0.1 with ephemeral ports)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyrmq.broker import Broker, BrokerConfig
from pyrmq.namesrv import NameServer
from pyrmq.remoting import TlsConfig
from pyrmq.storage import MessageStoreConfig


class LocalCluster:
    """`async with LocalCluster(store_dir, **broker_settings) as c:` starts a
    NameServer and a Broker on the running loop, both on 127.0.0.1 and free
    ports; `c.namesrv_addr` and `c.broker_addr` are what clients use.
    Keyword settings are BrokerConfig or MessageStoreConfig fields; `tls`
    is given to both servers (the broker's client side: tls.enable)."""

    def __init__(self, store_dir: str, *, tls: TlsConfig | None = None, **settings: Any) -> None:
        self.store_dir = store_dir
        self.tls = tls
        bfields = {f.name for f in dataclasses.fields(BrokerConfig)}
        self._bkw = {k: v for k, v in settings.items() if k in bfields}
        skw = {k: v for k, v in settings.items() if k not in bfields}
        skw.setdefault("store_path_root_dir", store_dir)
        skw.setdefault("mapped_file_size_commit_log", 8 << 20)
        skw.setdefault("mapped_file_size_consume_queue", 10_000 * 20)
        skw.setdefault("max_hash_slot_num", 4096)
        skw.setdefault("max_index_num", 16384)
        skw.setdefault("warm_mapped_file_enable", False)
        self._skw = skw
        self.namesrv: NameServer | None = None
        self.broker: Broker | None = None

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv is not None
        return f"127.0.0.1:{self.namesrv.port}"

    @property
    def broker_addr(self) -> str:
        assert self.broker is not None
        return self.broker.addr

    async def start(self) -> None:
        self.namesrv = NameServer("127.0.0.1", 0, tls=self.tls)
        await self.namesrv.start()
        await self.start_broker()

    async def start_broker(self) -> None:
        """(Re)start the broker on the same store (and port, once known)."""
        port = self.broker.port if self.broker is not None else 0
        bcfg = BrokerConfig(
            **{
                "listen_host": "127.0.0.1",
                "listen_port": port,
                "namesrv_addr": self.namesrv_addr,
                "store_path_root_dir": self.store_dir,
                **self._bkw,
            }
        )
        self.broker = Broker(bcfg, MessageStoreConfig(**self._skw), tls=self.tls)
        await self.broker.start()

    async def stop_broker(self) -> None:
        if self.broker is not None and self.broker.store is not None:
            await self.broker.shutdown()

    async def shutdown(self) -> None:
        await self.stop_broker()
        if self.namesrv is not None:
            await self.namesrv.shutdown()

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
