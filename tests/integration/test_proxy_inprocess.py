"""The gRPC proxy in-process over a real broker (LocalCluster), for what a
subprocess cannot be set up for: a small maxClients, and the clients the
proxy forgets."""

from __future__ import annotations

import grpc

from pyrmq.proxy import ProxyConfig
from pyrmq.proxy.local import LocalBackend
from pyrmq.proxy.protocol import SERVICE, pb
from pyrmq.proxy.server import GrpcProxy
from pyrmq.testing import LocalCluster


def test_max_clients_and_forgetting_them(arun, tmp_path):
    async def main() -> None:
        async with LocalCluster(str(tmp_path)) as c:
            assert c.broker is not None
            proxy = GrpcProxy(
                LocalBackend(c.broker),
                ProxyConfig(grpc_server_port=0, listen_host="127.0.0.1", max_clients=3),
            )
            await proxy.start()
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
                    beat = ch.unary_unary(
                        f"/{SERVICE}/Heartbeat",
                        request_serializer=lambda m: m.SerializeToString(),
                        response_deserializer=pb.HeartbeatResponse.FromString,
                    )
                    bye = ch.unary_unary(
                        f"/{SERVICE}/NotifyClientTermination",
                        request_serializer=lambda m: m.SerializeToString(),
                        response_deserializer=pb.NotifyClientTerminationResponse.FromString,
                    )

                    async def heartbeat(cid: str) -> int:
                        r = await beat(pb.HeartbeatRequest(client_type=pb.PRODUCER),
                                       metadata=(("x-mq-client-id", cid),), timeout=10)  # fmt: skip
                        return int(r.status.code)

                    assert [await heartbeat(f"c{i}") for i in range(3)] == [pb.Code.OK] * 3
                    assert await heartbeat("c3") == pb.Code.TOO_MANY_REQUESTS
                    assert await heartbeat("c1") == pb.Code.OK, "a known client is served"
                    await bye(pb.NotifyClientTerminationRequest(),
                              metadata=(("x-mq-client-id", "c0"),), timeout=10)  # fmt: skip
                    assert await heartbeat("c3") == pb.Code.OK, "a terminated client made room"
                    proxy.config.client_idle = 0.0
                    assert proxy.service.clients.sweep() == 3, "idle clients are forgotten"
                    assert proxy.service.clients.clients == {}
            finally:
                await proxy.shutdown()

    arun(main())
