"""The proxy's settings, by RocketMQ 5's names (rmq-proxy.json's keys; in
local mode they sit in broker.conf beside the broker's own).

``load_proxy_json`` reads a cluster-mode proxy's rmq-proxy.json: the keys
below by their RocketMQ names; other RocketMQ keys are reported once and
left alone."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields
from typing import Any

log = logging.getLogger("pyrmq.proxy")

#: RocketMQ 5 proxy's gRPC port (grpcServerPort)
DEFAULT_GRPC_PORT = 8081


@dataclass(slots=True)
class ProxyConfig:
    #: grpcServerPort; 0: any free port (tests)
    grpc_server_port: int = DEFAULT_GRPC_PORT
    #: where the gRPC port listens (the broker's listen host in local mode)
    listen_host: str = "0.0.0.0"
    #: maxMessageSize: a body over it is MESSAGE_BODY_TOO_LARGE
    max_message_size: int = 4 * 1024 * 1024
    #: maxDelayTimeMills: a delivery_timestamp further ahead is
    #: ILLEGAL_DELIVERY_TIME (RocketMQ's timerMaxDelaySec, 3 days)
    max_delay_ms: int = 3 * 24 * 3600 * 1000
    #: enableTopicMessageTypeCheck: a message whose type the topic's
    #: message.type does not take is refused
    topic_message_type_check: bool = True
    #: how long an RPC waits for the broker (seconds)
    request_timeout: float = 3.0
    #: a client not heard from (heartbeat, telemetry, any RPC) for this
    #: long is dropped from the producer and consumer tables (seconds)
    client_idle: float = 120.0
    #: pyrmq: clients known at once; a new one past it is TOO_MANY_REQUESTS
    #: (a flood of made-up client ids costs no more than this)
    max_clients: int = 10_000
    #: cluster mode: topicRouteServiceCacheRefreshSeconds, how long a
    #: topic's route and message type are used before asking again
    topic_route_cache_refresh_s: float = 20.0
    #: cluster mode: subscriptionGroupConfigCacheRefreshSeconds, the same
    #: for a consumer group's config
    group_config_cache_refresh_s: float = 20.0


#: rmq-proxy.json keys -> ProxyConfig fields (and their types)
JSON_KEYS: dict[str, str] = {
    "grpcServerPort": "grpc_server_port",
    "maxMessageSize": "max_message_size",
    "maxDelayTimeMills": "max_delay_ms",
    "enableTopicMessageTypeCheck": "topic_message_type_check",
    "topicRouteServiceCacheRefreshSeconds": "topic_route_cache_refresh_s",
    "subscriptionGroupConfigCacheRefreshSeconds": "group_config_cache_refresh_s",
}
#: rmq-proxy.json keys read by `pyrmq proxy` itself
OWN_KEYS = ("namesrvAddr", "proxyMode", "rocketMQClusterName")


def load_proxy_json(path: str | None, overrides: dict[str, Any]) -> tuple[ProxyConfig, str]:
    """(config, namesrvAddr) from rmq-proxy.json (when given) and the
    command line's overrides (by the same keys). ValueError with what to
    fix for a file that is not JSON, a value of the wrong type, cluster
    mode not asked for, or no name server."""
    data: dict[str, Any] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object of rmq-proxy.json keys")
    data.update({k: v for k, v in overrides.items() if v is not None})
    mode = str(data.get("proxyMode", "cluster")).lower()
    if mode != "cluster":
        raise ValueError(
            f"proxyMode {data.get('proxyMode')!r}: `pyrmq proxy` is the cluster mode; the local "
            "mode runs inside a broker (`pyrmq broker --enable-proxy` or enableProxy=true)"
        )
    if str(data.get("aclEnable", "false")).lower() == "true":
        raise ValueError(
            "aclEnable: the cluster-mode proxy does not check ACL yet; run the proxy in the "
            "broker (enableProxy=true, with the broker's aclEnable) or leave aclEnable off"
        )
    namesrv = str(data.get("namesrvAddr") or "")
    if not namesrv:
        raise ValueError("no name server: give -n host:9876 or namesrvAddr in rmq-proxy.json")
    types = {f.name: f.type for f in fields(ProxyConfig)}
    kw: dict[str, Any] = {}
    for key, value in data.items():
        name = JSON_KEYS.get(key)
        if name is None:
            if key not in OWN_KEYS and key != "aclEnable":
                log.info("proxy: rmq-proxy.json key %s is not used by pyrmq", key)
            continue
        want = types[name]
        try:
            if want == "bool":
                if str(value).lower() not in ("true", "false"):
                    raise ValueError
                kw[name] = str(value).lower() == "true"
            elif want == "int":
                kw[name] = int(value)
            else:
                kw[name] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}: {value!r} is not a {want}") from None
    return ProxyConfig(**kw), namesrv
