"""Running the servers: `pyrmq namesrv [-c namesrv.conf]`, `pyrmq broker -c
broker.conf`, `pyrmq controller -c controller.conf` and `pyrmq standalone`
(a NameServer and a Broker in one process)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from pyrmq.broker import Broker, BrokerConfig, busy_poll, load_broker_conf
from pyrmq.broker.loop_slice import LoopSlice
from pyrmq.common.config_file import read_properties, write_json_atomic
from pyrmq.common.errors import ClientError
from pyrmq.common.listen import AcceptErrorReporter
from pyrmq.common.threads import named_executor
from pyrmq.controller import Controller, ControllerConfig, load_controller_conf
from pyrmq.metrics import MetricsConfig
from pyrmq.namesrv import NameServer
from pyrmq.namesrv.config import NamesrvRuntimeConfig
from pyrmq.remoting import TlsConfig

log = logging.getLogger("pyrmq")

#: --event-loop's choices
EVENT_LOOPS = ("asyncio", "uvloop")


def add_arguments(sub: Any) -> None:
    ns = sub.add_parser("namesrv", help="run a NameServer")
    ns.add_argument("--host", default="0.0.0.0", help="address to listen on")
    ns.add_argument("-p", "--port", type=int, default=None, help="(9876, or listenPort of -c)")
    ns.add_argument("--kv-config", default=None, help="KV config file (default ~/namesrv/)")
    ns.add_argument(
        "-c",
        "--config",
        default=None,
        help="namesrv.conf: listenPort, enableAllTopicList, enableTopicList, "
        "scanNotActiveBrokerInterval (updateNamesrvConfig writes changes back here), and "
        "enableControllerInNamesrv=true with the controller keys to serve a controller on "
        "the name server's port",
    )
    _add_tls_argument(ns)
    ns.add_argument(
        "--metrics-exporter-type",
        choices=("DISABLE", "PROM"),
        default=None,
        help="PROM: a Prometheus endpoint (or metricsExporterType in -c; default DISABLE)",
    )
    ns.add_argument(
        "--metrics-prom-exporter-host",
        default=None,
        help="address the metrics endpoint binds (metricsPromExporterHost; default all)",
    )
    ns.add_argument(
        "--metrics-prom-exporter-port",
        type=int,
        default=None,
        help="metrics endpoint port (metricsPromExporterPort; default 5557, 0: any free port)",
    )
    _add_event_loop_argument(ns)
    ns.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)

    ct = sub.add_parser(
        "controller", help="run a RocketMQ 5 controller (automatic master failover)"
    )
    ct.add_argument(
        "-c", "--config", required=True, help="controller.conf (controllerDLegerPeers, ...)"
    )
    _add_event_loop_argument(ct)
    ct.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)

    br = sub.add_parser("broker", help="run a Broker from a broker.conf")
    br.add_argument("-c", "--config", default=None, help="RocketMQ broker.conf (properties)")
    br.add_argument("-n", "--namesrv-addr", default=None, help="name servers, ';'-separated")
    _add_tls_argument(br)
    _add_proxy_arguments(br)
    _add_event_loop_argument(br)
    br.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)

    _add_proxy_command(sub)

    st = sub.add_parser("standalone", help="run a NameServer and a Broker in one process")
    st.add_argument("--store", default="./pyrmq-store", help="store folder (./pyrmq-store)")
    st.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on and advertise (127.0.0.1; use this host's IP "
        "or 0.0.0.0 to serve other machines)",
    )
    st.add_argument("--namesrv-port", type=int, default=9876)
    st.add_argument("--broker-port", type=int, default=10911)
    st.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default=None)
    st.add_argument("-c", "--config", default=None, help="broker.conf with more settings")
    st.add_argument("--auto-create-topic", choices=("true", "false"), default=None)
    _add_tls_argument(st)
    _add_proxy_arguments(st)
    _add_event_loop_argument(st)
    st.add_argument(
        "--ready-file",
        default=None,
        help="write {namesrv, broker, pid} as JSON here once listening",
    )


def _add_proxy_command(sub: Any) -> None:
    px = sub.add_parser(
        "proxy",
        help="run RocketMQ 5's gRPC proxy in front of a cluster (its cluster mode; "
        "the 5.x SDKs connect here)",
    )
    px.add_argument(
        "-n", "--namesrv-addr", default=None, help="name servers, ';'-separated (or namesrvAddr)"
    )
    px.add_argument(
        "-pc",
        "--proxy-config",
        default=None,
        metavar="FILE",
        help="rmq-proxy.json (namesrvAddr, grpcServerPort, maxMessageSize, "
        "enableTopicMessageTypeCheck, topicRouteServiceCacheRefreshSeconds, ...)",
    )
    px.add_argument("--host", default="0.0.0.0", help="address the gRPC port listens on")
    px.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="the gRPC port (grpcServerPort; default 8081, 0: any free port)",
    )
    _add_event_loop_argument(px)
    px.add_argument(
        "--ready-file", default=None, help="write {grpc, pid} as JSON here once listening"
    )


def _add_proxy_arguments(parser: Any) -> None:
    parser.add_argument(
        "--enable-proxy",
        action="store_true",
        default=None,
        help="serve RocketMQ 5's gRPC protocol (the 5.x SDKs) in this process "
        "(or enableProxy=true in -c)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="the gRPC port (grpcServerPort; default 8081, 0: any free port)",
    )


def _proxy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.enable_proxy:
        out["enableProxy"] = "true"
    if args.grpc_port is not None:
        out["grpcServerPort"] = args.grpc_port
    return out


@contextlib.asynccontextmanager
async def _local_proxy(broker: Broker) -> AsyncIterator[dict[str, str]]:
    """RocketMQ 5's proxy in local mode beside the broker when
    enableProxy=true; yields the ready file's {"grpc": host:port}."""
    if not broker.config.enable_proxy:
        yield {}
        return
    from pyrmq.proxy import ProxyConfig
    from pyrmq.proxy.local import LocalBackend
    from pyrmq.proxy.server import GrpcProxy

    cfg = broker.config
    proxy = GrpcProxy(
        LocalBackend(broker),
        ProxyConfig(
            grpc_server_port=cfg.grpc_server_port,
            listen_host=cfg.listen_host,
            max_message_size=broker.store_config.max_message_size,
            max_delay_ms=cfg.timer_max_delay_sec * 1000,
        ),
    )
    await proxy.start()
    try:
        yield {"grpc": f"{broker.ip}:{proxy.port}"}
    finally:
        await proxy.shutdown()


def _add_event_loop_argument(parser: Any) -> None:
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=None,
        help="the process's event loop: uvloop (the default where it is installed: less "
        "CPU a request), or asyncio's own",
    )


def loop_factory(args: argparse.Namespace) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop a server command runs on (--event-loop).

    uvloop by default: it takes about a tenth off the broker's CPU a request
    and off a lone send's round trip (bench/README.md, "uvloop under the
    broker, a third time"); where it cannot be imported, asyncio's loop.
    asyncio's is made on busy_poll's selector, which polls itself when
    eventLoopBusyPollUs asks (on uvloop a LoopPoller does)."""
    choice = getattr(args, "event_loop", None)
    if choice == "asyncio":
        return busy_poll.new_event_loop
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ClientError(
                "--event-loop uvloop: uvloop is not installed (pip install uvloop)"
            ) from None
        return busy_poll.new_event_loop
    return uvloop.new_event_loop


def _add_tls_argument(parser: Any) -> None:
    parser.add_argument(
        "--tls-config",
        default=None,
        metavar="FILE",
        help="tls.properties: tls.server.mode (disabled|permissive|enforcing), "
        "tls.server.certPath, tls.server.keyPath, ... (RocketMQ's tls.config.file; its keys "
        "win over tls.* keys of -c)",
    )


def _tls_config(props: dict[str, Any], args: argparse.Namespace) -> TlsConfig:
    return TlsConfig.from_properties(props, args.tls_config)


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("PYRMQ_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def _ready_until_signalled(path: str | None, **info: Any) -> None:
    """Say the server is ready (`_ready`), then serve until SIGINT or
    SIGTERM. The handlers are in place before the ready file is written:
    whoever reads it may stop the server at once, and a SIGTERM before
    them would kill it without its shutdown."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        _ready(path, **info)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    log.info("shutting down")


def _ready(path: str | None, **info: Any) -> None:
    # Everything allocated while starting lives as long as the process: keep
    # it out of the collector's generations (the SYNC_FLUSH send profile
    # showed 11% in gc).
    gc.freeze()
    if path:
        write_json_atomic(path, dict(info, pid=os.getpid()))


def _namesrv_metrics(args: argparse.Namespace, props: dict[str, Any]) -> MetricsConfig:
    """namesrv.conf's metrics keys, the command line's over them."""
    flags = {
        "metricsExporterType": args.metrics_exporter_type,
        "metricsPromExporterHost": args.metrics_prom_exporter_host,
        "metricsPromExporterPort": args.metrics_prom_exporter_port,
    }
    return MetricsConfig.from_properties(
        {**props, **{k: v for k, v in flags.items() if v is not None}}
    )


def _metrics_info(metrics: Any) -> dict[str, str]:
    """The ready file's "metrics": the endpoint's host:port, when on."""
    return {"metrics": metrics.addr} if metrics is not None else {}


async def run_namesrv(args: argparse.Namespace) -> int:
    props: dict[str, Any] = dict(read_properties(args.config)) if args.config else {}
    port = args.port if args.port is not None else int(props.get("listenPort", 9876))
    ctl_cfg = None
    if str(props.get("enableControllerInNamesrv", "false")).strip().lower() == "true":
        ctl_cfg = ControllerConfig.from_properties(props)
    tls = _tls_config(props, args)
    metrics = _namesrv_metrics(args, props)
    async with NameServer(
        args.host,
        port,
        kv_config_path=args.kv_config,
        tls=tls,
        metrics=metrics,
        settings=NamesrvRuntimeConfig.settings_from_properties(props),
        config_path=args.config,
    ) as ns:
        addr = f"{args.host}:{ns.port}"
        info = _metrics_info(ns.metrics)
        if ctl_cfg is None:
            log.info("NameServer ready: clients and brokers use %s", addr)
            await _ready_until_signalled(args.ready_file, namesrv=addr, **info)
            return 0
        async with Controller(ctl_cfg, server=ns.server) as ctl:
            log.info("NameServer ready on %s, with controller %s", addr, ctl.address)
            await _ready_until_signalled(
                args.ready_file, namesrv=addr, controller=ctl.address, **info
            )
    return 0


async def run_controller(args: argparse.Namespace) -> int:
    cfg = load_controller_conf(args.config)
    async with Controller(cfg) as ctl:
        log.info("controller ready: brokers use controllerAddr=%s", ctl.address)
        await _ready_until_signalled(args.ready_file, controller=ctl.address)
    return 0


async def run_proxy(args: argparse.Namespace) -> int:
    from pyrmq.proxy.cluster import ClusterBackend
    from pyrmq.proxy.config import load_proxy_json
    from pyrmq.proxy.server import GrpcProxy

    cfg, namesrv = load_proxy_json(
        args.proxy_config, {"namesrvAddr": args.namesrv_addr, "grpcServerPort": args.grpc_port}
    )
    cfg.listen_host = args.host
    backend = ClusterBackend(cfg, [a.strip() for a in namesrv.split(";") if a.strip()])
    proxy = GrpcProxy(backend, cfg)
    await proxy.start()
    try:
        host = args.host if args.host not in ("0.0.0.0", "") else "127.0.0.1"
        log.info("proxy ready: 5.x clients use %s:%d (name servers %s)", host, proxy.port, namesrv)
        await _ready_until_signalled(args.ready_file, grpc=f"{host}:{proxy.port}")
    finally:
        await proxy.shutdown()
    return 0


def _loop_slice(bcfg: BrokerConfig) -> LoopSlice:
    """The event loop thread's scheduler slice as broker.conf sets it, its
    busy share read without the time the loop spent busy polling."""
    loop = asyncio.get_running_loop()
    return LoopSlice(bcfg.event_loop_sched_slice_us, cpu=busy_poll.work_time(loop))


async def run_broker(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else {}
    overrides.update(_proxy_overrides(args))
    bcfg, scfg = load_broker_conf(args.config, overrides)
    tls = _tls_config(dict(read_properties(args.config)) if args.config else {}, args)
    async with (
        _loop_slice(bcfg),
        Broker(bcfg, scfg, tls=tls, config_path=args.config) as broker,
        _local_proxy(broker) as proxy,
    ):
        info = _metrics_info(broker.metrics) | proxy
        await _ready_until_signalled(args.ready_file, broker=broker.addr, **info)
    return 0


async def run_standalone(args: argparse.Namespace) -> int:
    store = os.path.abspath(args.store)
    tls = _tls_config(dict(read_properties(args.config)) if args.config else {}, args)
    if tls.server_mode.value == "enforcing" and not tls.enable:
        # the broker registers with its own name server, over TLS then: it
        # trusts (and, for mutual TLS, shows) the server's own certificate
        tls = dataclasses.replace(
            tls,
            enable=True,
            client_trust_cert_path=tls.client_trust_cert_path or tls.server_cert_path,
            client_cert_path=tls.client_cert_path or tls.server_cert_path,
            client_key_path=tls.client_key_path or tls.server_key_path,
            client_key_password=tls.client_key_password or tls.server_key_password,
        )
    async with NameServer(
        args.host,
        args.namesrv_port,
        kv_config_path=os.path.join(store, "namesrv", "kv.json"),
        tls=tls,
    ) as ns:
        namesrv = f"{args.host if args.host != '0.0.0.0' else '127.0.0.1'}:{ns.port}"
        overrides: dict[str, Any] = {
            "storePathRootDir": store,
            "namesrvAddr": namesrv,
            "listenPort": args.broker_port,
            "listenHost": args.host,
        }
        if args.host not in ("0.0.0.0", ""):
            overrides["brokerIP1"] = args.host
        if args.flush:
            overrides["flushDiskType"] = args.flush
        if args.auto_create_topic:
            overrides["autoCreateTopicEnable"] = args.auto_create_topic
        overrides.update(_proxy_overrides(args))
        bcfg, scfg = load_broker_conf(args.config, overrides)
        async with (
            _loop_slice(bcfg),
            Broker(bcfg, scfg, tls=tls, config_path=args.config) as broker,
            _local_proxy(broker) as proxy,
        ):
            log.info(
                "pyrmq standalone ready: name server %s, broker %s, store %s (%s). "
                "Point clients at the name server %s. Ctrl-C stops.",
                namesrv,
                broker.addr,
                store,
                scfg.flush_disk_type.value,
                namesrv,
            )
            if proxy:
                log.info("5.x SDKs (gRPC): point them at %s", proxy["grpc"])
            info = _metrics_info(broker.metrics) | proxy
            await _ready_until_signalled(
                args.ready_file, namesrv=namesrv, broker=broker.addr, **info
            )
    return 0


def main(args: argparse.Namespace) -> int:
    _setup_logging()
    run = {
        "namesrv": run_namesrv,
        "broker": run_broker,
        "standalone": run_standalone,
        "controller": run_controller,
        "proxy": run_proxy,
    }[args.cmd]

    async def serve() -> int:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(AcceptErrorReporter())
        # asyncio.to_thread and run_in_executor(None, ...) (the timer's file,
        # ACL files, the store's close) on threads named for top -H as well
        loop.set_default_executor(named_executor("asyncio", "pyrmq-asyncio"))
        return await run(args)

    # uvloop, or asyncio's loop on busy_poll's selector, which polls only
    # once the broker's configuration asks it to (eventLoopBusyPollUs)
    with asyncio.Runner(loop_factory=loop_factory(args)) as runner:
        return runner.run(serve())
