"""Prometheus metrics for the broker and the name server (RocketMQ 5's
names; the table is `pyrmq.metrics.names.METRICS`). Imports only
`pyrmq.common` and prometheus_client: the servers hand it their numbers."""

from pyrmq.metrics.config import DEFAULT_PROM_PORT, MetricsConfig, check_exporter
from pyrmq.metrics.exporter import Family, PromExporter
from pyrmq.metrics.names import METRICS, OTHER, MetricSpec
from pyrmq.metrics.tally import BrokerTallies, RpcTally, Tally

__all__ = [
    "DEFAULT_PROM_PORT",
    "METRICS",
    "OTHER",
    "BrokerTallies",
    "Family",
    "MetricSpec",
    "MetricsConfig",
    "PromExporter",
    "RpcTally",
    "Tally",
    "check_exporter",
]
