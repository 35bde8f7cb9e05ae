"""NameServerMetrics: the name server's Prometheus endpoint: its request
latencies (rocketmq_rpc_latency) and the size of its route table."""

from __future__ import annotations

from pyrmq.metrics import Family, MetricsConfig, PromExporter, RpcTally
from pyrmq.namesrv.route_info_manager import RouteInfoManager
from pyrmq.remoting import RemotingServer


class NameServerMetrics:
    def __init__(
        self, config: MetricsConfig, server: RemotingServer, routes: RouteInfoManager
    ) -> None:
        self.routes = routes
        self.rpc = RpcTally(config.metrics_rpc_latency_sample_every)
        self._server = server
        self.exporter = PromExporter(
            config.metrics_prom_exporter_host,
            config.metrics_prom_exporter_port,
            # RocketMQ's name server has no cluster: its node is its address
            ("", "nameserver", f"{server.host}:{server.port}"),
            self.collect,
        )

    @property
    def addr(self) -> str:
        return self.exporter.addr

    async def start(self) -> None:
        await self.exporter.start()
        self._server.rpc_sample_every = self.rpc.sample_every
        self._server.rpc_observer = self.rpc.observe

    def node_known(self) -> None:
        """The name server's port is bound (it was 0 when asked)."""
        s = self._server
        self.exporter.node = ("", "nameserver", f"{s.host}:{s.port}")

    async def shutdown(self) -> None:
        await self.exporter.shutdown()

    def collect(self) -> list[Family]:
        f_rpc = Family.of("rocketmq_rpc_latency")
        for labels, c in self.rpc.snapshot():
            f_rpc.histogram.append((("remoting", *labels), c[2:], c[1] / 1000))
        f_brokers = Family.of("pyrmq_namesrv_brokers")
        f_brokers.add((), len(self.routes.broker_live_table))
        f_topics = Family.of("pyrmq_namesrv_topics")
        f_topics.add((), len(self.routes.topic_queue_table))
        return [f_rpc, f_brokers, f_topics]
