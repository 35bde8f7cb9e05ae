"""MetricsConfig: RocketMQ 5's exporter keys (metricsExporterType,
metricsPromExporterHost, metricsPromExporterPort), for the broker (in
broker.conf) and the name server (namesrv.conf or its command line)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pyrmq.common.config_file import settings_from_properties
from pyrmq.common.errors import ClientError

#: RocketMQ's default metricsPromExporterPort
DEFAULT_PROM_PORT = 5557
#: distinct topic (or topic+group) label values one metric keeps
DEFAULT_LABEL_VALUE_LIMIT = 1000
#: rocketmq_rpc_latency times one request in this many, at random gaps
DEFAULT_RPC_LATENCY_SAMPLE_EVERY = 16
#: RocketMQ's MetricsExporterType values; pyrmq exports PROM only
EXPORTER_TYPES = ("DISABLE", "PROM")
_NOT_HERE = ("OTLP_GRPC", "LOG")


def check_exporter(
    exporter_type: str, port: int, label_value_limit: int, rpc_sample_every: int = 1
) -> None:
    """ClientError (one line) for settings an exporter cannot start with."""
    if exporter_type in _NOT_HERE:
        raise ClientError(
            f"metricsExporterType={exporter_type}: pyrmq exports PROM only "
            "(or DISABLE, the default)"
        )
    if exporter_type not in EXPORTER_TYPES:
        raise ClientError(
            f"metricsExporterType={exporter_type!r}: expected one of {', '.join(EXPORTER_TYPES)}"
        )
    if not 0 <= port <= 65535:
        raise ClientError(f"metricsPromExporterPort {port} is not a TCP port")
    if label_value_limit < 1:
        raise ClientError("metricsLabelValueLimit must be >= 1")
    if rpc_sample_every < 1:
        raise ClientError("metricsRpcLatencySampleEvery must be >= 1 (1: every request)")


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsConfig:
    #: DISABLE (default: no port opened) or PROM (a Prometheus endpoint)
    metrics_exporter_type: str = "DISABLE"
    #: the address the endpoint binds; empty: all addresses (as RocketMQ)
    metrics_prom_exporter_host: str = ""
    #: 0: any free port (the bound one is in the ready file / runtime info)
    metrics_prom_exporter_port: int = DEFAULT_PROM_PORT
    #: pyrmq: the cardinality cap per metric (topic and topic+group values)
    metrics_label_value_limit: int = DEFAULT_LABEL_VALUE_LIMIT
    #: pyrmq: rocketmq_rpc_latency times one request in this many (random
    #: gaps; counts scaled back); 1: every request (~0.5 us more per request)
    metrics_rpc_latency_sample_every: int = DEFAULT_RPC_LATENCY_SAMPLE_EVERY

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "metrics_exporter_type", self.metrics_exporter_type.strip().upper()
        )
        check_exporter(
            self.metrics_exporter_type,
            self.metrics_prom_exporter_port,
            self.metrics_label_value_limit,
            self.metrics_rpc_latency_sample_every,
        )

    @property
    def enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> MetricsConfig:
        return cls(**settings_from_properties(cls, props))
