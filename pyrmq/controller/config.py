"""ControllerConfig: RocketMQ 5's ControllerConfig keys (controller.conf, or
the controller keys of a namesrv.conf with enableControllerInNamesrv=true).

Keys read (Java camelCase as in RocketMQ; snake_case works too):

  controllerDLegerGroup        Raft group name (reported by GET_METADATA_INFO,
                               part of the peer-list check)
  controllerDLegerPeers        "n0-host:port;n1-host:port;n2-host:port": id and
                               Raft transport address of every controller
  controllerDLegerSelfId       this controller's id in the peer list
  controllerStorePath          Raft journal + snapshot folder (default
                               ~/DLedgerController, as RocketMQ)
  enableElectUncleanMaster     elect outside the SyncStateSet (false)
  scanNotActiveBrokerInterval  ms between liveness scans on the leader (5000)
  electMasterMaxRetryCount     tries of a leader-triggered election (3)
  notifyBrokerRoleChanged      send NOTIFY_BROKER_ROLE_CHANGED (true)
  listenPort                   remoting port of a standalone controller
                               (19876: ControllerStartup's default)
  bindAddress / listenHost     address the remoting port listens on (0.0.0.0)
  enableControllerInNamesrv    namesrv.conf: serve the controller on the name
                               server's port (false)

One difference from RocketMQ: DLedger serves Raft and controller requests
on one port (the peer address); pysyncobj needs its own port, so here the
peer addresses are Raft ports and listenPort is the remoting port brokers
dial (controllerAddr). Wire formats: pyrmq/controller/protocol.py."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from pyrmq.common.config_file import read_properties, settings_from_properties
from pyrmq.common.errors import ClientError

#: ControllerStartup sets NettyServerConfig.listenPort to 19876
DEFAULT_LISTEN_PORT = 19876

_ALIASES = {
    "controllerDLegerGroup": "controller_dleger_group",
    "controllerDLegerPeers": "controller_dleger_peers",
    "controllerDLegerSelfId": "controller_dleger_self_id",
    "bindAddress": "listen_host",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Peer:
    """One entry of controllerDLegerPeers: id and Raft transport address."""

    id: str
    host: str
    port: int

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


def parse_peers(text: str) -> tuple[Peer, ...]:
    """controllerDLegerPeers -> peers in the given order. ClientError names
    the entry that is malformed or repeated."""
    peers: list[Peer] = []
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        pid, sep, addr = entry.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not pid.strip() or not colon or not host.strip() or not port.isdigit():
            raise ClientError(
                f"controllerDLegerPeers entry {entry!r} is not id-host:port "
                "(e.g. n0-127.0.0.1:9877)"
            )
        if not 0 < int(port) < 65536:
            raise ClientError(f"controllerDLegerPeers entry {entry!r}: port out of range")
        peers.append(Peer(pid.strip(), host.strip().strip("[]"), int(port)))
    if not peers:
        raise ClientError("controllerDLegerPeers is empty (expected n0-host:port;n1-host:port;...)")
    ids = [p.id for p in peers]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ClientError(f"controllerDLegerPeers repeats the id(s) {', '.join(dup)}")
    addrs = [p.addr for p in peers]
    dup = sorted({a for a in addrs if addrs.count(a) > 1})
    if dup:
        raise ClientError(f"controllerDLegerPeers repeats the address(es) {', '.join(dup)}")
    return tuple(peers)


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """RocketMQ's ControllerConfig (the keys this controller uses)."""

    controller_dleger_group: str = "DefaultControllerGroup"
    controller_dleger_peers: str = ""
    controller_dleger_self_id: str = ""
    controller_store_path: str = ""
    enable_elect_unclean_master: bool = False
    scan_not_active_broker_interval_ms: int = 5000
    elect_master_max_retry_count: int = 3
    notify_broker_role_changed: bool = True
    listen_port: int = DEFAULT_LISTEN_PORT
    listen_host: str = "0.0.0.0"
    enable_controller_in_namesrv: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ControllerConfig:
        cfg = cls(**settings_from_properties(cls, props, _ALIASES))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """ClientError on a config the controller cannot run with."""
        if not self.controller_dleger_peers.strip():
            raise ClientError("controllerDLegerPeers is required (n0-host:port;n1-host:port;...)")
        if not self.controller_dleger_self_id.strip():
            raise ClientError("controllerDLegerSelfId is required (this controller's peer id)")
        peers = parse_peers(self.controller_dleger_peers)
        if self.controller_dleger_self_id not in {p.id for p in peers}:
            raise ClientError(
                f"controllerDLegerSelfId {self.controller_dleger_self_id!r} is not in "
                f"controllerDLegerPeers ({', '.join(p.id for p in peers)})"
            )
        if self.scan_not_active_broker_interval_ms <= 0:
            raise ClientError("scanNotActiveBrokerInterval must be > 0 (milliseconds)")
        if self.elect_master_max_retry_count < 1:
            raise ClientError("electMasterMaxRetryCount must be >= 1")
        if not 0 <= self.listen_port < 65536:
            raise ClientError(f"listenPort {self.listen_port} is out of range")

    @property
    def peers(self) -> tuple[Peer, ...]:
        return parse_peers(self.controller_dleger_peers)

    @property
    def self_peer(self) -> Peer:
        return next(p for p in self.peers if p.id == self.controller_dleger_self_id)

    @property
    def store_path(self) -> str:
        """controllerStorePath, or RocketMQ's default ~/DLedgerController."""
        return self.controller_store_path or os.path.join(
            os.path.expanduser("~"), "DLedgerController"
        )

    def peers_fingerprint(self) -> str:
        """The group and peer list in one canonical string: every controller
        of a group must have the same one (checked through the Raft log)."""
        entries = ";".join(f"{p.id}-{p.addr}" for p in sorted(self.peers, key=lambda p: p.id))
        return f"{self.controller_dleger_group}|{entries}"


def load_controller_conf(
    path: str | None, overrides: Mapping[str, Any] | None = None
) -> ControllerConfig:
    """controller.conf (+ overrides) -> a validated ControllerConfig."""
    props: dict[str, Any] = dict(read_properties(path)) if path else {}
    props.update(overrides or {})
    return ControllerConfig.from_properties(props)
