"""The official 5.x SDK (rocketmq-python-client 5.1.2, in subprocesses: see
sdk5.py) producing through ``pyrmq standalone --enable-proxy``, and what it
sent read back by the 4.x C++ client: one stored message, whichever protocol
wrote it. Every test compares the sets sent and received."""

from __future__ import annotations

import pathlib
import time

import pytest

from tests.interop import sdk5
from tests.interop.conftest import StandaloneServer
from tests.interop.cpp import Clients, Received, pull_walk, unique
from tests.interop.sdk5 import make_topic

WAIT = 60.0  # seconds for what should happen promptly, on a loaded machine


@pytest.fixture(scope="module")
def server(proxy_server: StandaloneServer) -> StandaloneServer:
    return proxy_server


def read_topic(clients: Clients, topic: str, want: int, timeout: float = WAIT) -> list[Received]:
    """Pull every queue of topic with the C++ client until `want` messages
    are there (or timeout: what was there)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pull_walk(
            clients.pull_consumer(), topic, timeout=WAIT, extra_props=("color", "TAGS", "KEYS")
        )
        if len(got) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_sends_are_stored_as_the_4x_client_reads_them(
    server: StandaloneServer, clients: Clients
) -> None:
    topic = make_topic(server, "")  # untyped, as a topic made for 4.x clients
    common = {"endpoint": server.grpc, "topic": topic, "tag": "TagA", "keys": "key"}
    sent = sdk5.run("send", n=20, prefix="sync", props={"color": "blue"}, **common)
    more = {"async": True, "props": {"color": "red"}}
    sent += sdk5.run("send", n=20, prefix="async", **more, **common)
    assert len(sent) == 40
    got = read_topic(clients, topic, 40)
    assert sorted(r.body.decode() for r in got) == sorted(s["body"] for s in sent)
    by_id = {s["id"]: s for s in sent}
    assert len(by_id) == 40, "every message has its own id"
    for r in got:
        s = by_id[r.msg_id]  # the 5.x message id is the 4.x UNIQ_KEY
        assert r.body.decode() == s["body"]
        assert r.queue_offset == s["offset"], (r, s)
        assert r.tags == b"TagA"
        assert r.keys == f"key-{s['sent']}".encode()
        assert r.props["color"] == (b"blue" if s["body"].startswith("sync") else b"red")


def test_a_message_group_keeps_to_one_queue_in_order(
    server: StandaloneServer, clients: Clients
) -> None:
    topic = make_topic(server, "FIFO")
    sent = sdk5.run("send", endpoint=server.grpc, topic=topic, n=30, group="order-42")
    got = read_topic(clients, topic, 30)
    assert sorted(r.body for r in got) == sorted(s["body"].encode() for s in sent)
    assert len({r.queue_id for r in got}) == 1, "one group, one queue"
    in_queue = [r.body.decode() for r in sorted(got, key=lambda r: r.queue_offset)]
    assert in_queue == [s["body"] for s in sent], "stored in the order sent"


def test_the_topics_message_type_is_checked(server: StandaloneServer, clients: Clients) -> None:
    """A FIFO message to a NORMAL topic: the SDK is told the topic's types
    by the route and refuses it itself, and the proxy would too (see
    tests/proxy for the proxy's own answer)."""
    topic = make_topic(server, "")  # untyped: NORMAL
    out = sdk5.run("fail", endpoint=server.grpc, topic=topic, group="g")
    assert len(out) == 1 and "error" in out[0], out
    assert "type" in out[0]["error"].lower(), out
    assert read_topic(clients, topic, 1, timeout=2.0) == []


def test_a_missing_topic_has_no_route(server: StandaloneServer) -> None:
    """The proxy answers QueryRoute TOPIC_NOT_FOUND (tests/proxy checks the
    code); the SDK reports it as a route it could not fetch."""
    topic = unique("Missing")
    out = sdk5.run("fail", endpoint=server.grpc, topic=topic)
    assert len(out) == 1 and "error" in out[0], out
    assert f"topic:{topic} route" in out[0]["error"], out


def test_transactions_commit_and_roll_back(server: StandaloneServer, clients: Clients) -> None:
    topic = make_topic(server, "TRANSACTION")
    committed = sdk5.run(
        "tx", endpoint=server.grpc, topic=topic, n=5, resolution="commit", prefix="yes"
    )
    rolled_back = sdk5.run(
        "tx", endpoint=server.grpc, topic=topic, n=5, resolution="rollback", prefix="no"
    )
    halves = [o for o in committed if "half" in o]
    assert len(halves) == 5 and all(o["tx"] for o in halves)
    assert sum("ended" in o for o in committed + rolled_back) == 10
    got = read_topic(clients, topic, 5)
    time.sleep(1.0)  # a rolled-back message would have shown by now
    got = read_topic(clients, topic, 5)
    assert sorted(r.body.decode() for r in got) == sorted(o["body"] for o in halves)
    assert {r.msg_id for r in got} == {o["id"] for o in halves}


def test_an_orphaned_transaction_is_recovered_by_check_back(
    server: StandaloneServer, clients: Clients, tmp_path: pathlib.Path
) -> None:
    """The producer dies after its half messages; the broker asks another
    producer of the topic over its Telemetry stream, which commits."""
    topic = make_topic(server, "TRANSACTION")
    halves = [
        o
        for o in sdk5.run("tx", endpoint=server.grpc, topic=topic, n=3, resolution="orphan")
        if "half" in o
    ]
    assert len(halves) == 3
    assert read_topic(clients, topic, 1, timeout=1.0) == [], "nothing visible before a decision"
    checker = sdk5.start(
        "checker", endpoint=server.grpc, topic=topic, seconds=WAIT, answer="commit"
    )
    try:
        got = read_topic(clients, topic, 3)
    finally:
        checker.kill()
        out, err = checker.communicate(timeout=30)
    checked = {o["checked"] for o in sdk5.parse(out) if "checked" in o}
    assert sorted(r.body.decode() for r in got) == sorted(o["body"] for o in halves), err[-2000:]
    assert checked >= {o["id"] for o in halves}, (checked, err[-2000:])
