"""Timed delivery (pyrmq/broker/timer.py): a message with a delivery time is
stored in its topic no earlier than that, whether the 5.x SDK sent it
(delivery_timestamp) or the 4.x C++ client (TIMER_DELIVER_MS,
TIMER_DELAY_SEC), across a broker crash, and exactly once. "No earlier" is
read from the delivered record's own store time."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.interop import sdk5
from tests.interop.conftest import StandaloneServer
from tests.interop.cpp import Clients, make_message, pull_walk
from tests.interop.sdk5 import make_group, make_topic
from tests.interop.test_sdk5_consumer import received

WAIT = 60.0


@pytest.fixture(scope="module")
def server(proxy_server: StandaloneServer) -> StandaloneServer:
    return proxy_server


def read_until(clients: Clients, topic: str, want: int, timeout: float = WAIT) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = pull_walk(clients.pull_consumer(), topic, timeout=WAIT)
        if len(got) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def test_a_5x_delivery_timestamp_is_kept(server: StandaloneServer, clients: Clients) -> None:
    topic, group = make_topic(server, "DELAY"), make_group(server)
    before = time.time()
    sent = sdk5.run("send", endpoint=server.grpc, topic=topic, n=5, delay_s=5, prefix="later")
    # the SDK sends whole seconds: due at the second it computed
    due_s = int(before + 5)
    assert read_until(clients, topic, 1, timeout=1.0) == [], "nothing before it is due"
    out = sdk5.run("simple", timeout=WAIT + 60, endpoint=server.grpc, topic=topic, group=group,
                   want=5, seconds=WAIT, invisible_s=20, mode="ack")  # fmt: skip
    got = received(out)
    assert sorted(o["recv"] for o in got) == sorted(s["body"] for s in sent)
    stored = read_until(clients, topic, 5)
    assert len(stored) == 5
    assert all(r.store_ms >= due_s * 1000 for r in stored), [r.store_ms for r in stored]


def test_4x_timer_properties(server: StandaloneServer, clients: Clients) -> None:
    topic = make_topic(server)
    p = clients.producer()
    now_ms = int(time.time() * 1000)
    due = {}
    for i in range(10):
        at = now_ms + 2000 + 300 * i
        body = f"at-{i}"
        r = p.send_sync(make_message(topic, body, props={"TIMER_DELIVER_MS": str(at)}))
        assert r.status == 0
        due[body] = at
    r = p.send_sync(make_message(topic, "in-3s", props={"TIMER_DELAY_SEC": "3"}))
    due["in-3s"] = now_ms + 3000
    past = p.send_sync(make_message(topic, "past", props={"TIMER_DELIVER_MS": str(now_ms - 1)}))
    assert past.status == 0
    due["past"] = 0
    got = read_until(clients, topic, len(due))
    assert sorted(r.body.decode() for r in got) == sorted(due)
    for r in got:
        assert r.store_ms >= due[r.body.decode()], (r.body, r.store_ms, due[r.body.decode()])


def test_a_delivery_time_too_far_ahead_is_refused(
    server: StandaloneServer, clients: Clients
) -> None:
    topic = make_topic(server)
    p = clients.producer()
    too_far = int(time.time() * 1000) + 4 * 24 * 3600 * 1000
    # the broker answers MESSAGE_ILLEGAL naming timerMaxDelaySec
    # (tests/integration/test_timer_send.py); the C++ client reports it as
    # a send that failed on every broker
    with pytest.raises(Exception):  # noqa: B017 (the wheel raises a bare one)
        p.send_sync(make_message(topic, "x", props={"TIMER_DELIVER_MS": str(too_far)}))
    assert read_until(clients, topic, 1, timeout=1.0) == []


def test_timed_messages_survive_broker_crashes_and_arrive_once(
    make_server: Any, tmp_path: Any
) -> None:
    srv = make_server("--enable-proxy", "--grpc-port", "0")
    c = Clients(srv.namesrv)
    try:
        topic = make_topic(srv)
        p = c.producer()
        start = int(time.time() * 1000)
        due = {}
        for i in range(200):
            at = start + 1500 + 20 * i  # due over 1.5 .. 5.5 s
            body = f"m{i}"
            msg = make_message(topic, body, props={"TIMER_DELIVER_MS": str(at)})
            assert p.send_sync(msg).status == 0
            due[body] = at
    finally:
        c.close()
    time.sleep(2.5)  # some delivered, most not yet
    srv.restart(crash=True)
    time.sleep(1.0)
    srv.restart(crash=True)
    c = Clients(srv.namesrv)
    try:
        got = read_until(c, topic, len(due))
        time.sleep(1.0)
        got = pull_walk(c.pull_consumer(), topic, timeout=WAIT)
    finally:
        c.close()
    bodies = [r.body.decode() for r in got]
    assert sorted(bodies) == sorted(due), "every one, once"
    assert all(r.store_ms >= due[r.body.decode()] for r in got), "none early"
