"""Latency fault tolerance (MQFaultStrategy, LatencyFaultTolerance): the
latency -> isolation table, queue choice with an injected clock, then a real
slow broker (reached through a FaultProxy that delays every byte) next to a
fast one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pyrmq.common.message import Message, MessageQueue
from pyrmq.common.route import BrokerData, QueueData, TopicPublishInfo, TopicRouteData
from pyrmq.producer import Producer
from pyrmq.producer.fault import (
    ISOLATION_LATENCY_MS,
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
)
from pyrmq.testing.proxy import FaultProxy
from tests.client._producer_env import (
    PROXY_IP,
    create_topic,
    env,
    listen_addr,
    needs_proxy_ip,
    proxied_broker,
)


class FakeClock:
    """The injected time source: seconds, moved by the test only."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def publish_info(topic: str = "T", brokers: tuple[str, ...] = ("a", "b"), queues: int = 2):
    route = TopicRouteData(
        tuple(QueueData(b, queues, queues, 6) for b in brokers),
        tuple(BrokerData("c", b, {0: f"127.0.0.1:{10911 + i}"}) for i, b in enumerate(brokers)),
    )
    return TopicPublishInfo(route.publish_queues(topic), route)


def picks(strategy: MQFaultStrategy, info: TopicPublishInfo, n: int, last: str | None = None):
    return [strategy.select_one_message_queue(info, last) for _ in range(n)]


# -- the latency -> isolation table ------------------------------------------------------------

#: RocketMQ's latencyMax / notAvailableDuration: (latency ms, isolation s)
TABLE = [(50, 0), (100, 0), (550, 30), (1000, 60), (2000, 120), (3000, 180), (15000, 600)]


def _table_cases() -> list[tuple[int, int]]:
    cases = [(0, 0), (1, 0), (10**9, 600)]
    below = 0  # isolation of the bracket under each limit
    for limit, secs in TABLE:
        cases += [(limit - 1, below), (limit, secs), (limit + 1, secs)]
        below = secs
    return cases


@pytest.mark.parametrize(("latency_ms", "isolated_s"), _table_cases())
def test_latency_to_isolation_table(latency_ms: int, isolated_s: int) -> None:
    assert compute_not_available_duration(latency_ms) == isolated_s * 1000
    clock = FakeClock()
    s = MQFaultStrategy(True, clock)
    s.update_fault_item("a", latency_ms, False)
    lft = s.latency_fault_tolerance
    assert lft.items["a"].current_latency_ms == latency_ms
    if isolated_s:
        assert not lft.is_available("a")
        clock.advance(isolated_s - 0.001)
        assert not lft.is_available("a")
        clock.advance(0.001)
    assert lft.is_available("a")
    assert lft.is_available("never-seen")


def test_failure_counts_as_30000_ms() -> None:
    assert ISOLATION_LATENCY_MS == 30000
    clock = FakeClock()
    s = MQFaultStrategy(True, clock)
    s.update_fault_item("a", 3, True)  # failed quickly: still 600 s out
    lft = s.latency_fault_tolerance
    assert lft.items["a"].current_latency_ms == 3
    clock.advance(599.999)
    assert not lft.is_available("a")
    clock.advance(0.001)
    assert lft.is_available("a")
    # a later fast answer makes it available at once
    s.update_fault_item("a", 3, True)
    assert not lft.is_available("a")
    s.update_fault_item("a", 10, False)
    assert lft.is_available("a")


# -- queue choice -------------------------------------------------------------------------------


def test_isolated_broker_skipped_then_chosen_again() -> None:
    clock = FakeClock()
    s = MQFaultStrategy(True, clock)
    info = publish_info()
    # nothing known: plain rotation over every queue
    first = picks(s, info, 8)
    assert {(q.broker_name, q.queue_id) for q in first} == {
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
    }
    s.update_fault_item("a", 600, False)  # slow: 30 s
    got = picks(s, info, 20)
    assert {q.broker_name for q in got} == {"b"}
    assert {q.queue_id for q in got} == {0, 1}
    # the broker that failed last is not a reason to leave a good broker
    assert {q.broker_name for q in picks(s, info, 4, last="b")} == {"b"}
    clock.advance(29.999)
    assert {q.broker_name for q in picks(s, info, 8)} == {"b"}
    clock.advance(0.001)
    again = picks(s, info, 8)
    assert {(q.broker_name, q.queue_id) for q in again} == {
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
    }


def test_all_isolated_uses_the_least_bad_broker() -> None:
    clock = FakeClock()
    s = MQFaultStrategy(True, clock)
    info = publish_info(brokers=("a", "b", "c"))
    s.update_fault_item("a", 1500, False)  # 60 s
    s.update_fault_item("b", 600, False)  # 30 s: back first
    s.update_fault_item("c", 20, True)  # failed: 600 s
    got = picks(s, info, 6)
    assert {q.broker_name for q in got} == {"b"}
    assert {q.queue_id for q in got} == {0, 1}  # still rotating over its queues
    # back at the same time as b (30 s from now): the lower latency wins
    s.update_fault_item("a", 700, False)
    assert {q.broker_name for q in picks(s, info, 4)} == {"b"}
    s.update_fault_item("a", 560, False)
    assert {q.broker_name for q in picks(s, info, 4)} == {"a"}
    # once b's time has passed it is simply available
    clock.advance(30)
    assert {q.broker_name for q in picks(s, info, 6)} == {"a", "b"}


def test_least_bad_broker_outside_the_topic_is_forgotten() -> None:
    clock = FakeClock()
    s = MQFaultStrategy(True, clock)
    info = publish_info(brokers=("a",))
    s.update_fault_item("x", 600, False)  # another topic's broker, back soonest
    s.update_fault_item("a", 1500, False)
    q = s.select_one_message_queue(info, None)
    assert q.broker_name == "a"
    assert "x" not in s.latency_fault_tolerance.items
    assert s.latency_fault_tolerance.pick_one_at_least() == "a"
    assert LatencyFaultTolerance(clock).pick_one_at_least() is None


def test_disabled_strategy_is_round_robin_avoiding_the_failed_broker() -> None:
    clock = FakeClock()
    s = MQFaultStrategy(False, clock)
    info = publish_info()
    s.update_fault_item("a", 20000, False)
    s.update_fault_item("b", 1, True)
    assert s.latency_fault_tolerance.items == {}  # nothing recorded while off
    got = picks(s, info, 8)
    # strict rotation in route order
    order = [(q.broker_name, q.queue_id) for q in info.queues]
    start = order.index((got[0].broker_name, got[0].queue_id))
    assert [(q.broker_name, q.queue_id) for q in got] == [order[(start + i) % 4] for i in range(8)]
    # a retry avoids the broker the last attempt failed on
    assert {q.broker_name for q in picks(s, info, 6, last="a")} == {"b"}
    assert {q.broker_name for q in picks(s, info, 6, last="b")} == {"a"}
    # when it is the only broker, it is used anyway
    only = publish_info(brokers=("a",))
    assert {q.broker_name for q in picks(s, only, 3, last="a")} == {"a"}


# -- a real slow broker -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fast_and_slow(
    tmp_path: Any, delay: float, **producer_kw: Any
) -> AsyncIterator[tuple[Producer, FaultProxy]]:
    """broker-a direct, broker-b behind a FaultProxy adding `delay` seconds
    each way; topic SlowT has one queue on each; the producer knows both."""
    async with env(tmp_path, producer_kw=producer_kw) as e:
        b = await proxied_broker(e.cluster, str(tmp_path / "store-b"), broker_name="broker-b")
        assert b.broker is not None
        port = b.broker.port
        proxy = FaultProxy("127.0.0.1", port, listen_host=PROXY_IP, listen_port=port)
        await proxy.start()
        try:
            await create_topic(e.api, e.cluster.broker_addr, "SlowT", 1)
            await create_topic(e.api, listen_addr(b), "SlowT", 1)
            mqs = await e.producer.fetch_publish_message_queues("SlowT")
            assert mqs == [
                MessageQueue("SlowT", "broker-a", 0),
                MessageQueue("SlowT", "broker-b", 0),
            ]
            proxy.delay = delay
            yield e.producer, proxy
        finally:
            proxy.delay = 0.0
            await proxy.shutdown()
            await b.stop_broker()


async def _send(p: Producer, i: int) -> tuple[str, float]:
    t0 = time.monotonic()
    r = await p.send(Message("SlowT", f"m{i}".encode()))
    assert r.ok
    return r.message_queue.broker_name, time.monotonic() - t0


@needs_proxy_ip
def test_slow_broker_is_avoided_with_latency_fault_enable(arun, tmp_path):
    async def main() -> None:
        clock = FakeClock()
        async with fast_and_slow(tmp_path, 0.3, send_latency_fault_enable=True, clock=clock) as (
            p,
            _,
        ):
            # round robin reaches the slow broker within two sends
            sent = [await _send(p, i) for i in range(2)]
            slow = [t for name, t in sent if name == "broker-b"]
            assert len(slow) == 1 and slow[0] >= 0.55  # two delayed legs
            item = p.fault_strategy.latency_fault_tolerance.items["broker-b"]
            assert item.current_latency_ms >= 550
            isolation = compute_not_available_duration(item.current_latency_ms) / 1000
            assert isolation >= 30
            # every next send goes to the fast broker
            after = [(await _send(p, 10 + i))[0] for i in range(8)]
            assert after == ["broker-a"] * 8
            # when the isolation has passed, the slow broker gets traffic again
            clock.advance(isolation)
            later = [(await _send(p, 20 + i))[0] for i in range(2)]
            assert "broker-b" in later

    arun(main(), timeout=60)


@needs_proxy_ip
def test_slow_broker_keeps_its_turn_without_latency_fault_enable(arun, tmp_path):
    async def main() -> None:
        async with fast_and_slow(tmp_path, 0.3, send_latency_fault_enable=False) as (p, _):
            sent = [await _send(p, i) for i in range(6)]
            names = [name for name, _ in sent]
            assert all(names[i] != names[i + 1] for i in range(5)), names
            assert names.count("broker-b") == 3
            assert all(t >= 0.55 for name, t in sent if name == "broker-b")
            assert p.fault_strategy.latency_fault_tolerance.items == {}

    arun(main(), timeout=60)
