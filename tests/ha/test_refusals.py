"""Replication refuses what it must not copy, says why in one log line, and
leaves both stores as they were: a slave of another brokerName, a second
master under a taken brokerName and id, a master that lost data its slave
has, and a damaged, misplaced or truncated replication stream.

Servers run in this process on 127.0.0.1 with free ports; the damaged
streams come from a scripted master that speaks the replication protocol
(pyrmq/broker/ha/protocol.py) over a real socket."""

from __future__ import annotations

import asyncio
import logging
import pathlib
from typing import Any

import pytest

import rmqcore
from pyrmq.broker import Broker, BrokerConfig
from pyrmq.broker.ha import protocol
from pyrmq.namesrv import NameServer
from pyrmq.storage import MessageStoreConfig
from tests._waiting import wait_until

SEG = 8 << 20


def store_config(root: pathlib.Path, **kw: Any) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=kw.pop("segment", SEG),
        mapped_file_size_consume_queue=10_000 * 20,
        max_hash_slot_num=4096,
        max_index_num=16384,
        warm_mapped_file_enable=False,
        **kw,
    )


def broker(root: pathlib.Path, namesrv: str = "", **kw: Any) -> Broker:
    segment = kw.pop("segment", SEG)
    cfg = BrokerConfig(
        listen_host="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv,
        store_path_root_dir=str(root),
        ha_send_heartbeat_interval=500,
        **kw,
    )
    return Broker(cfg, store_config(root, segment=segment))


def slave_of(root: pathlib.Path, ha_addr: str, **kw: Any) -> Broker:
    """A SLAVE (brokerId 1) replicating from the master's HA address."""
    return broker(root, broker_role="SLAVE", broker_id=1, ha_master_address=ha_addr, **kw)


def put(b: Broker, n: int, topic: str = "RefT") -> None:
    assert b.store is not None
    for i in range(n):
        b.store.put_message_nowait(topic, i % 2, f"m{i}".encode())


def test_slave_of_another_broker_name_or_segment_size_is_refused(
    arun: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        master = broker(tmp_path / "m", broker_name="broker-a")
        await master.start()
        put(master, 10)
        assert master.ha is not None
        ha_addr = f"127.0.0.1:{master.ha.port}"
        cases = [
            ("other", {"broker_name": "broker-z"}, "has brokerName='broker-z'"),
            ("geometry", {"broker_name": "broker-a", "segment": 2 * SEG}, "mappedFileSize"),
        ]
        try:
            for name, kw, why in cases:
                slave = slave_of(tmp_path / name, ha_addr, **kw)
                await slave.start()
                try:
                    assert slave.ha_client is not None
                    await wait_until(
                        lambda s=slave, why=why: why in s.ha_client.last_refusal,
                        f"the master refusing the {name} slave",
                        stall_after=20,
                    )
                    assert slave.store is not None and slave.store.commit_log_max_offset == 0
                finally:
                    await slave.shutdown()
            assert master.ha.refused >= 2
            assert master.store is not None
            assert master.store.max_offset_in_queue("RefT", 0) == 5
        finally:
            await master.shutdown()

    with caplog.at_level(logging.ERROR, logger="pyrmq.broker.ha"):
        arun(main(), timeout=120)
    refusals = [r.getMessage() for r in caplog.records if "refused slave" in r.getMessage()]
    assert any("brokerName='broker-z'" in m for m in refusals), refusals


def test_a_master_that_lost_data_its_slave_has_is_not_copied_from(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    async def main() -> None:
        master = broker(tmp_path / "m")
        await master.start()
        assert master.ha is not None
        ha_port = master.ha.port
        put(master, 20)
        slave = slave_of(tmp_path / "s", f"127.0.0.1:{ha_port}")
        await slave.start()
        assert slave.store is not None and master.store is not None
        top = master.store.commit_log_max_offset
        try:
            await wait_until(
                lambda: slave.store.commit_log_max_offset == top,  # type: ignore[union-attr]
                "the slave copying the master",
                stall_after=20,
            )
            # the master's disk is replaced: an empty store on the same port
            await master.shutdown()
            for p in sorted((tmp_path / "m").rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
            master = broker(tmp_path / "m", ha_listen_port=ha_port)
            await master.start()
            put(master, 3)
            assert slave.ha_client is not None
            await wait_until(
                lambda: "the master lost data its slave has" in slave.ha_client.last_refusal,
                "the empty master refusing to feed its fuller slave",
                stall_after=20,
            )
            # the slave kept every byte it had
            assert slave.store.commit_log_max_offset == top
            assert slave.store.max_offset_in_queue("RefT", 0) == 10
        finally:
            await slave.shutdown()
            await master.shutdown()

    arun(main(), timeout=120)


def test_two_masters_with_one_name_and_id_the_second_is_refused(
    arun: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        addr = f"127.0.0.1:{ns.port}"
        first = broker(tmp_path / "a1", addr)
        second = broker(tmp_path / "a2", addr)
        await first.start()
        try:
            await second.start()
            table = ns.routes.broker_addr_table["broker-a"].broker_addrs
            assert table == {0: first.addr}
            await second.shutdown()
        finally:
            await first.shutdown()
            await ns.shutdown()

    with caplog.at_level(logging.ERROR):
        arun(main(), timeout=60)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "brokerId 0 is already registered by" in text


# -- a damaged stream ---------------------------------------------------------------------------


class ScriptedMaster:
    """Speaks the master's side of the replication protocol and sends what
    the test scripts: `frames` is a list of (offset, data, crc or None for
    the right one); then it closes, or cuts a frame short when `cut`."""

    def __init__(self, frames: list[tuple[int, bytes, int | None]], cut: bool = False) -> None:
        self.frames = frames
        self.cut = cut
        self.acks: list[int] = []
        self.served = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await protocol.read_hello(reader)
        answer = {
            "ok": True,
            "brokerName": hello["brokerName"],
            "brokerAddr": "",
            "commitLogFileSize": hello["commitLogFileSize"],
            "minOffset": 0,
            "maxOffset": 1 << 20,
            "startOffset": hello["maxOffset"],
        }
        writer.write(protocol.encode_hello(answer))
        for offset, data, crc in self.frames:
            header = protocol.encode_frame_header(offset, data)
            if crc is not None:
                header = protocol.FRAME.pack(offset, len(data), crc)
            writer.write(header + (data[: len(data) // 2] if self.cut else data))
        await writer.drain()
        for _ in range(0 if self.cut else 10):
            try:
                raw = await asyncio.wait_for(reader.readexactly(8), 0.3)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                break
            self.acks.append(protocol.OFFSET.unpack(raw)[0])
        writer.close()
        self.served.set()
        if self.server is not None:
            self.server.close()


def _records(tmp_path: pathlib.Path, n: int) -> bytes:
    core = rmqcore.MessageStoreCore(str(tmp_path / "source"), commit_log_file_size=SEG)
    for i in range(n):
        core.put("RefT", 0, f"body-{i}".encode() * 10)
    data = core.read(0, core.commit_log_max_offset)
    core.close()
    return data


@pytest.mark.parametrize("damage", ["body-byte", "crc", "offset", "cut"])
def test_a_damaged_replication_stream_writes_nothing_damaged(
    arun: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    data = _records(tmp_path, 6)
    rec = len(data) // 6

    async def main() -> None:
        bad = bytearray(data)
        frames: list[tuple[int, bytes, int | None]]
        cut = False
        if damage == "body-byte":  # damaged before the frame CRC was made
            bad[3 * rec + rec - 30] ^= 0x40
            frames = [(0, bytes(bad), None)]
        elif damage == "crc":
            frames = [(0, data, 12345)]
        elif damage == "offset":
            frames = [(0, data[: 2 * rec], None), (3 * rec, data[3 * rec :], None)]
        else:
            frames = [(0, data, None)]
            cut = True
        fake = ScriptedMaster(frames, cut)
        addr = await fake.start()
        slave = slave_of(tmp_path / "s", addr)
        await slave.start()
        try:
            await asyncio.wait_for(fake.served.wait(), 30)
            assert slave.store is not None
            kept = slave.store.commit_log_max_offset
            expected = {"body-byte": 3 * rec, "crc": 0, "offset": 2 * rec, "cut": 0}[damage]
            if damage == "cut":
                # whole records of the first half may land; never a torn one
                assert kept % rec == 0 and kept < len(data)
            else:
                assert kept == expected
            n = slave.store.max_offset_in_queue("RefT", 0)
            assert n == kept // rec
            got = slave.store.get_message("RefT", 0, 0, 32)
            for off, _ in got.ranges:
                assert slave.store.look_message_by_offset(off)["body"].startswith(b"body-")
        finally:
            await slave.shutdown()
        # what the slave wrote is a sound store
        core = rmqcore.MessageStoreCore(str(tmp_path / "s"), commit_log_file_size=SEG)
        assert core.recovery["bytes_trimmed"] == 0 and core.recovery["damaged_ranges"] == 0
        core.close()

    with caplog.at_level(logging.WARNING, logger="pyrmq.broker.ha"):
        arun(main(), timeout=60)
    if damage != "cut":
        text = "\n".join(r.getMessage() for r in caplog.records)
        want = {"body-byte": "record check", "crc": "failed its CRC", "offset": "expected"}
        assert want[damage] in text, text


def test_slave_read_enable_sends_slow_consumers_to_the_slave(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    """slaveReadEnable: a pull of data further behind the CommitLog's end
    than accessMessageInMemoryMaxRatio of RAM is answered with
    suggestWhichBrokerId=1, and pyrmq's consumer pulls from the slave next
    (ratio 0 here: any data is "behind"). Without it the master says 0."""
    from pyrmq.common.message import MessageQueue
    from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    async def main(read_enable: bool) -> dict[MessageQueue, int]:
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        addr = f"127.0.0.1:{ns.port}"
        root = tmp_path / str(read_enable)
        kw = {"slave_read_enable": read_enable, "access_message_in_memory_max_ratio": 0}
        master = broker(root / "m", addr, **kw)
        await master.start()
        slave = broker(root / "s", addr, broker_role="SLAVE", broker_id=1, **kw)
        await slave.start()
        got: list[str] = []

        async def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            got.extend(m.body.decode() for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        pc = PushConsumer(
            "sre", addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        try:
            assert master.store is not None and slave.store is not None
            master.topics.create_in_send("SreT", "TBW102", 1)
            for i in range(50):
                master.store.put_message_nowait("SreT", 0, f"m{i}".encode())
            await wait_until(
                lambda: (
                    "SreT" in slave.topics.table
                    and slave.store.max_offset_in_queue("SreT", 0) == 50
                ),  # type: ignore[union-attr]
                "the slave holding the topic and its 50 messages",
                stall_after=20,
            )
            pc.subscribe("SreT")
            pc.register_message_listener(listener)
            await pc.start()
            await wait_until(lambda: len(got) >= 50, "50 consumed", progress=lambda: len(got))
            return dict(pc.client.pull_from_which_node)
        finally:
            await pc.shutdown()
            await slave.shutdown()
            await master.shutdown()
            await ns.shutdown()

    async def both() -> None:
        with_read = await main(True)
        assert with_read and set(with_read.values()) == {1}, with_read
        without = await main(False)
        assert without and set(without.values()) == {0}, without

    arun(both(), timeout=120)


def test_a_sync_master_waits_for_as_many_slaves_as_required(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    """required_acks (controller mode sets it from allAckInSyncStateSet or
    inSyncReplicas): with 2 required a send is answered once both slaves
    hold it, and SLAVE_NOT_AVAILABLE when only one is connected."""
    from pyrmq.common.message import Message
    from pyrmq.common.results import SendStatus
    from pyrmq.producer import Producer

    async def main() -> None:
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        addr = f"127.0.0.1:{ns.port}"
        master = broker(tmp_path / "m", addr, broker_role="SYNC_MASTER")
        await master.start()
        slaves = [
            broker(tmp_path / f"s{i}", addr, broker_role="SLAVE", broker_id=i) for i in (1, 2)
        ]
        for s in slaves:
            await s.start()
        assert master.ha is not None and master.store is not None
        ha = master.ha
        try:
            await wait_until(
                lambda: sum(c.streaming and c.ack_offset >= 0 for c in ha.connections) == 2,
                "both slaves connected",
                stall_after=20,
            )
            ha.set_required_acks(2)
            async with Producer("need2", addr) as p:
                for i in range(20):
                    r = await p.send(Message("NeedT", f"m{i}".encode()))
                    assert r.send_status is SendStatus.SEND_OK
                    top = master.store.commit_log_max_offset
                    for s in slaves:
                        assert s.store is not None and s.store.commit_log_max_offset >= top
                await slaves[1].shutdown()
                await wait_until(
                    lambda: sum(c.streaming for c in ha.connections) == 1,
                    "the master seeing one slave gone",
                    stall_after=20,
                )
                r = await p.send(Message("NeedT", b"one slave"))
                assert r.send_status is SendStatus.SLAVE_NOT_AVAILABLE
                ha.set_required_acks(1)
                r = await p.send(Message("NeedT", b"one is enough"))
                assert r.send_status is SendStatus.SEND_OK
        finally:
            for s in slaves:
                await s.shutdown()
            await master.shutdown()
            await ns.shutdown()

    arun(main(), timeout=120)
