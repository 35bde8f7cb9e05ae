"""NameServer: route registry for brokers and clients (NamesrvController +
DefaultRequestProcessor)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import zlib
from typing import Any

from pyrmq.common.config_file import ConfigUpdater, JsonStateFile
from pyrmq.metrics import MetricsConfig
from pyrmq.namesrv.config import NamesrvRuntimeConfig, NamesrvSettings
from pyrmq.namesrv.metrics import NameServerMetrics
from pyrmq.namesrv.route_info_manager import BrokerConflictError, RouteInfoManager
from pyrmq.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode, TlsConfig
from pyrmq.remoting.connection import Connection

log = logging.getLogger("pyrmq.namesrv")

#: most bytes a compressed REGISTER_BROKER body may inflate to: the topic
#: table of a broker with ~200,000 topics; a zlib bomb (a 16 MiB frame can
#: inflate to 16 GiB) is refused instead of exhausting memory
MAX_REGISTER_BODY = 64 * 1024 * 1024


class NameServer:
    """`async with NameServer(port=9876) as ns:`. Brokers silent for
    `broker_channel_expired` seconds are dropped with their routes. `tls`:
    TLS on its port (tls.server.*; its files are read here)."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 9876,
        *,
        kv_config_path: str | None = None,
        broker_channel_expired: float = 120.0,
        scan_interval: float | None = None,
        tls: TlsConfig | None = None,
        metrics: MetricsConfig | None = None,
        settings: NamesrvSettings | None = None,
        config_path: str | None = None,
    ) -> None:
        self.routes = RouteInfoManager()
        #: what GET_NAMESRV_CONFIG shows and UPDATE_NAMESRV_CONFIG changes
        #: (written back to config_path, the namesrv.conf of -c, if any)
        self.config = NamesrvRuntimeConfig(
            settings, {"kvConfigPath": kv_config_path or ""}, config_path
        )
        self._config_updater = ConfigUpdater(self.config, "the name server", "namesrv.conf")
        self.server = RemotingServer(host, port, name="namesrv", tls=tls)
        #: the Prometheus endpoint (metricsExporterType=PROM), else None
        self.metrics = (
            NameServerMetrics(metrics, self.server, self.routes)
            if metrics is not None and metrics.enabled
            else None
        )
        self.kv_config_path = kv_config_path
        self._kv_file = JsonStateFile(kv_config_path, self._kv_snapshot) if kv_config_path else None
        self.broker_channel_expired = broker_channel_expired
        if scan_interval is not None:
            self.config.settings.scan_not_active_broker_interval = round(scan_interval * 1000)
        self.kv: dict[str, dict[str, str]] = {}
        self._scan_task: asyncio.Task[None] | None = None
        s = self.server
        s.register(RequestCode.REGISTER_BROKER, self._register_broker)
        s.register(RequestCode.UNREGISTER_BROKER, self._unregister_broker)
        s.register(RequestCode.QUERY_DATA_VERSION, self._query_data_version)
        s.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._get_route)
        s.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        s.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._topic_list)
        s.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self._delete_topic)
        s.register(RequestCode.GET_TOPICS_BY_CLUSTER, self._topics_by_cluster)
        s.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, self._system_topics)
        s.register(RequestCode.PUT_KV_CONFIG, self._put_kv)
        s.register(RequestCode.GET_KV_CONFIG, self._get_kv)
        s.register(RequestCode.DELETE_KV_CONFIG, self._delete_kv)
        s.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self._wipe_write_perm)
        s.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self._add_write_perm)
        s.register(RequestCode.GET_NAMESRV_CONFIG, self._get_config)
        s.register(RequestCode.UPDATE_NAMESRV_CONFIG, self._update_config)
        s.add_close_listener(self.routes.on_channel_closed)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def scan_interval(self) -> float:
        """Seconds between two scans for silent brokers (scanNotActiveBrokerInterval)."""
        return self.config.settings.scan_not_active_broker_interval / 1000

    async def start(self) -> None:
        if self._kv_file is not None:
            self.kv = (
                self._kv_file.load(
                    lambda d: {str(ns): dict(t) for ns, t in d.get("configTable", {}).items()}
                )
                or {}
            )
        if self.metrics is not None:
            await self.metrics.start()  # first: a taken port fails fast
        try:
            await self.server.start()
        except BaseException:
            if self.metrics is not None:
                await self.metrics.shutdown()
            raise
        if self.metrics is not None:
            self.metrics.node_known()
        self.config.fixed["listenPort"] = self.port
        self._scan_task = asyncio.create_task(self._scan_loop(), name="pyrmq:namesrv:scan")
        log.info(
            "NameServer listening on %s:%d (tls.server.mode=%s)",
            self.server.host,
            self.port,
            self.server.tls_mode.value,
        )

    async def shutdown(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        await self.server.shutdown()
        if self.metrics is not None:
            await self.metrics.shutdown()

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                self.routes.scan_not_active_broker(self.broker_channel_expired)
            except Exception:
                log.exception("namesrv: broker scan failed")

    # -- processors -------------------------------------------------------------

    def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        try:
            broker_name = f["brokerName"]
            broker_addr = f["brokerAddr"]
            cluster = f["clusterName"]
            broker_id = int(f.get("brokerId", "0"))
            crc = int(f.get("bodyCrc32", "0") or 0)
            master_epoch = int(f.get("masterEpoch", "-1") or -1)
        except (KeyError, ValueError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"bad register header: {e}")
        if crc and (zlib.crc32(cmd.body) & 0x7FFFFFFF) != crc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="register body CRC mismatch")
        try:
            wrapper = _decode_register_body(cmd.body, f.get("compressed") == "true")
            topic_configs, data_version = _register_tables(wrapper)
        except (ValueError, TypeError, KeyError, RecursionError, struct.error, zlib.error) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"bad register body: {e!r}")
        try:
            out = self.routes.register_broker(
                cluster,
                broker_addr,
                broker_name,
                broker_id,
                f.get("haServerAddr", ""),
                topic_configs,
                data_version,
                conn,
                master_epoch,
            )
        except BrokerConflictError as e:
            log.error("refused registration: %s", e)
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(e))
        body = b""
        order = self.kv.get("ORDER_TOPIC_CONFIG")
        if order:
            body = json.dumps({"table": order}).encode()
        return cmd.response(ResponseCode.SUCCESS, out, body)

    def _unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        try:
            broker_id = int(f.get("brokerId", "0") or 0)
        except ValueError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="brokerId is not an integer")
        self.routes.unregister_broker(
            f.get("clusterName", ""), f.get("brokerAddr", ""), f.get("brokerName", ""), broker_id
        )
        return cmd.response(ResponseCode.SUCCESS)

    def _query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        addr = cmd.ext_fields.get("brokerAddr", "")
        try:
            theirs = json.loads(cmd.body) if cmd.body else None
        except (ValueError, RecursionError):
            theirs = None
        ours = self.routes.data_version_of(addr)
        self.routes.touch(addr)
        changed = ours is None or ours != theirs
        return cmd.response(
            ResponseCode.SUCCESS,
            {"changed": "true" if changed else "false"},
            json.dumps(ours).encode() if ours is not None else b"",
        )

    def _get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        order = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(topic)
        if order:
            route["orderTopicConf"] = order
        return cmd.response(ResponseCode.SUCCESS, body=_json(route))

    def _cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=_json(self.routes.cluster_info()))

    def _topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not self.config.settings.enable_all_topic_list:
            # RocketMQ's answer when enableAllTopicList=false
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="disable")
        return cmd.response(
            ResponseCode.SUCCESS, body=_json({"topicList": self.routes.all_topics()})
        )

    def _topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER (224), header cluster: TopicList of the
        topics with a queue on any broker of the cluster."""
        if not self.config.settings.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="disable")
        cluster = cmd.ext_fields.get("cluster") or ""
        if not cluster:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark="request code 224 lacks header field cluster"
            )
        topics = self.routes.topics_by_cluster(cluster)
        if topics is None:
            known = ", ".join(sorted(self.routes.cluster_addr_table)) or "none"
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"cluster [{cluster}] is not registered (known: {known})",
            )
        return cmd.response(ResponseCode.SUCCESS, body=_json({"topicList": topics}))

    def _system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS (304): TopicList of the cluster and
        broker names, with one master's address (brokerAddr)."""
        topics, addr = self.routes.system_topics()
        body: dict[str, Any] = {"topicList": topics}
        if addr:
            body["brokerAddr"] = addr
        return cmd.response(ResponseCode.SUCCESS, body=_json(body))

    def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(cmd.ext_fields.get("topic", ""))
        return cmd.response(ResponseCode.SUCCESS)

    def _wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER (205), header brokerName: every topic's
        queues on that broker lose PERM_WRITE in this name server's routes,
        so producers stop sending there (reads go on). Response header
        wipeTopicCount: how many topics. Lasts until ADD_WRITE_PERM_OF_BROKER
        or until the broker registers a changed topic table (its
        dataVersion moved, or it registers anew after a restart or expiry):
        its periodic re-registration with an unchanged table keeps the wipe,
        as RocketMQ's RouteInfoManager.registerBroker does."""
        return self._write_perm(cmd, wipe=True)

    def _add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER (327), header brokerName: every topic's
        queues on that broker get perm READ|WRITE (6), as RocketMQ sets it
        (a read-only or inherit bit is not kept). Response header
        addTopicCount."""
        return self._write_perm(cmd, wipe=False)

    def _write_perm(self, cmd: RemotingCommand, *, wipe: bool) -> RemotingCommand:
        name = (cmd.ext_fields.get("brokerName") or "").strip()
        if not name:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"request code {cmd.code} lacks header field brokerName",
            )
        count = self.routes.operate_write_perm(name, wipe=wipe)
        what = "wipe" if wipe else "add"
        log.info("%s write perm of broker[%s]: %d topics", what, name, count)
        remark = None
        if name not in self.routes.broker_addr_table:
            # RocketMQ answers SUCCESS with a count of 0; the remark says why
            known = ", ".join(sorted(self.routes.broker_addr_table)) or "none"
            remark = f"broker[{name}] is not registered in this name server (known: {known})"
        key = "wipeTopicCount" if wipe else "addTopicCount"
        return cmd.response(ResponseCode.SUCCESS, {key: str(count)}, remark=remark)

    def _get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (319): every setting as Java properties text."""
        return cmd.response(ResponseCode.SUCCESS, body=self.config.format().encode())

    async def _update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG (318), body: properties text of the keys to
        change (see ConfigUpdater: checked whole, written into
        namesrv.conf, applied)."""
        remark = await self._config_updater.update(cmd.body)
        return cmd.response(ResponseCode.SUCCESS, remark=remark)

    def _put_kv(self, conn: Connection, cmd: RemotingCommand) -> Any:
        f = cmd.ext_fields
        if not f.get("namespace") or not f.get("key"):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="namespace and key are required")
        self.kv.setdefault(f["namespace"], {})[f["key"]] = f.get("value", "")
        return self._persist_kv(cmd)

    def _get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        value = self.kv.get(f.get("namespace", ""), {}).get(f.get("key", ""))
        if value is None:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {f.get('namespace')} Key: {f.get('key')}",
            )
        return cmd.response(ResponseCode.SUCCESS, {"value": value})

    def _delete_kv(self, conn: Connection, cmd: RemotingCommand) -> Any:
        f = cmd.ext_fields
        table = self.kv.get(f.get("namespace", ""), {})
        table.pop(f.get("key", ""), None)
        return self._persist_kv(cmd)

    def _kv_snapshot(self) -> dict[str, Any]:
        return {"configTable": {ns: dict(t) for ns, t in self.kv.items() if t}}

    async def _persist_kv(self, cmd: RemotingCommand) -> RemotingCommand:
        if self._kv_file is not None:
            await self._kv_file.persist()
        return cmd.response(ResponseCode.SUCCESS)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _int32(v: Any) -> int:
    """A Java int from a JSON number or numeric string (ValueError or
    TypeError otherwise)."""
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise TypeError(f"{v!r} is not an integer")
    n = int(v)
    if not -(2**31) <= n < 2**31:
        raise ValueError(f"{n} is out of the 32-bit range")
    return n


def _register_tables(
    wrapper: dict[str, Any],
) -> tuple[dict[str, dict[str, int]], dict[str, Any]]:
    """(topicConfigTable, dataVersion) of a decoded register body, checked
    whole before any route changes: per topic only the fields the routes
    use, as ints. ValueError/TypeError name what is malformed."""
    tcw = wrapper.get("topicConfigSerializeWrapper") or {}
    if not isinstance(tcw, dict):
        raise TypeError("topicConfigSerializeWrapper is not an object")
    table = tcw.get("topicConfigTable") or {}
    version = tcw.get("dataVersion") or {}
    if not isinstance(table, dict) or not isinstance(version, dict):
        raise TypeError("topicConfigTable and dataVersion must be objects")
    out: dict[str, dict[str, int]] = {}
    for name, tc in table.items():
        if not isinstance(tc, dict):
            raise TypeError(f"the config of topic {name!r} is not an object")
        out[name] = {
            "readQueueNums": _int32(tc.get("readQueueNums", 0)),
            "writeQueueNums": _int32(tc.get("writeQueueNums", 0)),
            "perm": _int32(tc.get("perm", 6)),
            "topicSysFlag": _int32(tc.get("topicSysFlag", tc.get("topicSynFlag", 0)) or 0),
        }
    return out, version


def _decode_register_body(body: bytes, compressed: bool) -> dict[str, Any]:
    """REGISTER_BROKER body: RegisterBrokerBody JSON, or Java's compressed
    form (zlib of: int32 len + DataVersion JSON, int32 topic count, per topic
    int32 len + TopicConfig JSON, int32 len + filter server list JSON)."""
    if not body:
        return {}
    if not compressed:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    inflater = zlib.decompressobj()
    raw = inflater.decompress(body, MAX_REGISTER_BODY)
    if inflater.unconsumed_tail:
        raise ValueError(f"inflates to more than {MAX_REGISTER_BODY} bytes")
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (n,) = struct.unpack_from(">i", raw, pos)
        if n < 0 or pos + 4 + n > len(raw):
            raise ValueError("length runs past the body")
        pos += 4 + n
        return raw[pos - n : pos]

    version = json.loads(chunk())
    (count,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    table = {}
    for _ in range(max(0, min(count, 1_000_000))):
        tc = json.loads(chunk())
        table[tc["topicName"]] = tc
    return {
        "topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": version},
        "filterServerList": json.loads(chunk()) if pos < len(raw) else [],
    }
