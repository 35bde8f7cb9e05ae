"""The official 5.x SDK consuming through the proxy (POP: the broker's
PopService): SimpleConsumer receive and ack, redelivery after the invisible
duration, change_invisible_duration, max attempts into the DLQ, the
PushConsumer with retries, tag and SQL92 filters, FIFO groups in order,
4.x-sent messages received over gRPC, and what is out surviving a broker
crash. Every test compares the sets sent and received."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.interop import sdk5
from tests.interop.conftest import REPO, StandaloneServer
from tests.interop.cpp import Clients, make_message, pull_walk, unique, wait_route
from tests.interop.sdk5 import make_group, make_topic

WAIT = 60.0


@pytest.fixture(scope="module")
def server(proxy_server: StandaloneServer) -> StandaloneServer:
    return proxy_server


def send(server: StandaloneServer, topic: str, n: int, **kw: Any) -> list[dict[str, Any]]:
    sent = sdk5.run("send", endpoint=server.grpc, topic=topic, n=n, **kw)
    assert len(sent) == n, sent
    return sent


def consume(server: StandaloneServer, verb: str, **kw: Any) -> list[dict[str, Any]]:
    kw.setdefault("seconds", WAIT)
    return sdk5.run(verb, timeout=kw["seconds"] + 60, endpoint=server.grpc, **kw)


def received(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in out if "recv" in o]


def test_simple_consumer_receives_and_acks(server: StandaloneServer) -> None:
    topic, group = make_topic(server), make_group(server)
    sent = send(server, topic, 30, tag="TagA", props={"color": "blue"})
    out = consume(server, "simple", topic=topic, group=group, want=30, invisible_s=20, mode="ack")
    got = received(out)
    assert sorted(o["recv"] for o in got) == sorted(s["body"] for s in sent)
    assert {o["id"] for o in got} == {s["id"] for s in sent}
    assert all(o["attempt"] == 1 and o["topic"] == topic and o["tag"] == "TagA" for o in got)
    assert len([o for o in out if "acked" in o]) == 30, [o for o in out if "error" in o]
    # acked: nothing comes back, even after the invisible time
    again = consume(server, "simple", topic=topic, group=group, want=1, seconds=4.0,
                    invisible_s=1, mode="ack")  # fmt: skip
    assert received(again) == []


def test_an_unacked_message_comes_back_after_its_invisible_time(server: StandaloneServer) -> None:
    topic, group = make_topic(server), make_group(server)
    sent = send(server, topic, 3)
    out = consume(server, "simple", topic=topic, group=group, want=6, invisible_s=2, mode="noack")
    by_body = collections.defaultdict(list)
    for o in received(out):
        by_body[o["recv"]].append(o)
    assert sorted(by_body) == sorted(s["body"] for s in sent)
    for body, seen in by_body.items():
        assert [o["attempt"] for o in seen][:2] == [1, 2], (body, seen)
        assert seen[1]["t"] - seen[0]["t"] >= 2.0 - 0.05, ("delivered again early", seen)
        assert seen[0]["id"] == seen[1]["id"], "the same message id on redelivery"


def test_change_invisible_duration(server: StandaloneServer) -> None:
    topic, group = make_topic(server), make_group(server)
    (first,) = send(server, topic, 1, prefix="longer")
    out = consume(server, "simple", topic=topic, group=group, want=2, invisible_s=2,
                  mode="change-noack", change_s=6)  # fmt: skip
    seen = received(out)
    changed = [o for o in out if "changed" in o]
    assert [o["recv"] for o in seen] == [first["body"]] * 2, out
    assert changed, out
    assert seen[1]["t"] - changed[0]["t"] >= 6.0 - 0.05, ("the new invisible time held", out)
    # changed, then acked with the new handle: done
    topic2, group2 = make_topic(server), make_group(server)
    send(server, topic2, 2)
    out = consume(server, "simple", topic=topic2, group=group2, want=2, invisible_s=2,
                  mode="change", change_s=3)  # fmt: skip
    assert len([o for o in out if "acked" in o]) == 2, out
    again = consume(server, "simple", topic=topic2, group=group2, want=1, seconds=6.0,
                    invisible_s=1, mode="ack")  # fmt: skip
    assert received(again) == []


def test_past_max_attempts_a_message_goes_to_the_dlq(
    server: StandaloneServer, clients: Clients
) -> None:
    topic, group = make_topic(server), make_group(server, "-r", "1")
    (sent,) = send(server, topic, 1, prefix="doomed")
    out = consume(server, "simple", topic=topic, group=group, want=2, invisible_s=1, mode="noack")
    assert [o["attempt"] for o in received(out)] == [1, 2], out
    dlq = f"%DLQ%{group}"
    deadline = time.monotonic() + WAIT
    got: list[Any] = []
    while time.monotonic() < deadline and not got:
        time.sleep(0.5)
        if wait_route(clients, dlq, timeout=1.0):
            got = pull_walk(clients.pull_consumer(), dlq, timeout=WAIT)
    assert [r.body.decode() for r in got] == [sent["body"]]
    assert got[0].msg_id == sent["id"]
    later = consume(server, "simple", topic=topic, group=group, want=1, seconds=3.0,
                    invisible_s=1, mode="ack")  # fmt: skip
    assert received(later) == [], "a dead-lettered message is not delivered again"


def test_push_consumer_retries_a_failed_message(server: StandaloneServer) -> None:
    topic, group = make_topic(server), make_group(server)
    sent = send(server, topic, 10)
    out = consume(server, "push", topic=topic, group=group, want=10, fail_first=1)
    ok = [o for o in received(out) if o["ok"]]
    assert sorted(o["recv"] for o in ok) == sorted(s["body"] for s in sent), out
    assert all(o["attempt"] == 2 for o in ok), "each succeeded on its second delivery"


def test_tag_and_sql92_filters(server: StandaloneServer) -> None:
    topic = make_topic(server)
    a_blue = send(server, topic, 5, tag="TagA", props={"color": "blue"}, prefix="a-blue")
    a_red = send(server, topic, 5, tag="TagA", props={"color": "red"}, prefix="a-red")
    b_blue = send(server, topic, 5, tag="TagB", props={"color": "blue"}, prefix="b-blue")
    tagged = consume(server, "simple", topic=topic, group=make_group(server), want=10,
                     invisible_s=20, mode="ack", expr="TagA")  # fmt: skip
    assert sorted(o["recv"] for o in received(tagged)) == sorted(s["body"] for s in a_blue + a_red)
    blue = consume(server, "simple", topic=topic, group=make_group(server), want=10,
                   invisible_s=20, mode="ack", sql="color = 'blue'")  # fmt: skip
    assert sorted(o["recv"] for o in received(blue)) == sorted(s["body"] for s in a_blue + b_blue)
    # nothing else comes later
    more = consume(server, "simple", topic=topic, group=make_group(server), want=11,
                   seconds=6.0, invisible_s=20, mode="ack", expr="TagB")  # fmt: skip
    assert sorted(o["recv"] for o in received(more)) == sorted(s["body"] for s in b_blue)


def test_fifo_groups_deliver_each_message_group_in_order(server: StandaloneServer) -> None:
    topic = make_topic(server, "FIFO")
    group = make_group(server, "-o", "true")
    sent = []
    for g in ("alpha", "beta", "gamma"):
        sent += send(server, topic, 10, group=g, prefix=g)
    out = consume(server, "push", topic=topic, group=group, want=30)
    got = [o["recv"] for o in received(out) if o["ok"]]
    assert sorted(got) == sorted(s["body"] for s in sent)
    for g in ("alpha", "beta", "gamma"):
        mine = [b for b in got if b.startswith(g)]
        assert mine == [f"{g}-{i}" for i in range(10)], (g, mine)


def test_a_fifo_message_not_acked_blocks_its_queue_until_redelivered(
    server: StandaloneServer,
) -> None:
    topic = make_topic(server, "FIFO")
    group = make_group(server, "-o", "true")
    send(server, topic, 3, group="solo", prefix="solo")
    out = consume(server, "simple", topic=topic, group=group, want=6, invisible_s=2,
                  mode="noack", batch=1)  # fmt: skip
    got = [o["recv"] for o in received(out)]
    # the first is redelivered before the second is ever handed out
    assert got[:2] == ["solo-0", "solo-0"], got


def test_messages_sent_by_the_4x_client_are_received_over_grpc(
    server: StandaloneServer, clients: Clients
) -> None:
    topic = make_topic(server)
    producer = clients.producer()
    bodies = []
    for i in range(10):
        body = f"from-cpp-{i}"
        r = producer.send_sync(make_message(topic, body, tags="TagC", keys=f"k{i}"))
        assert r.status == 0
        bodies.append(body)
    out = consume(server, "simple", topic=topic, group=make_group(server), want=10,
                  invisible_s=20, mode="ack")  # fmt: skip
    got = received(out)
    assert sorted(o["recv"] for o in got) == sorted(bodies)
    assert all(o["tag"] == "TagC" for o in got)


def test_what_is_out_survives_a_broker_crash(make_server: Any, tmp_path: Any) -> None:
    """Acked messages stay acked and messages out (popped, not acked) come
    back after their invisible time, across a SIGKILL of the broker."""
    conf = tmp_path / "crash.conf"
    conf.write_text("flushConsumerOffsetInterval=500\n")
    srv = make_server("--enable-proxy", "--grpc-port", "0", "-c", str(conf))
    topic, group = make_topic(srv), make_group(srv)
    sent = send(srv, topic, 20)
    acked = received(consume(srv, "simple", topic=topic, group=group, want=10, batch=1,
                             invisible_s=30, mode="ack"))  # fmt: skip
    out = received(consume(srv, "simple", topic=topic, group=group, want=10,
                           invisible_s=6, mode="noack"))  # fmt: skip
    assert len(acked) == 10 and len(out) == 10
    assert {o["recv"] for o in acked} | {o["recv"] for o in out} == {s["body"] for s in sent}
    time.sleep(2.0)  # past flushConsumerOffsetInterval: the offsets are on disk
    srv.restart(crash=True)
    again = consume(srv, "simple", topic=topic, group=group, want=11, seconds=25.0,
                    invisible_s=30, mode="ack")  # fmt: skip
    got = received(again)
    assert sorted(o["recv"] for o in got) == sorted(o["recv"] for o in out), again
    assert all(o["attempt"] == 2 for o in got)


def test_4x_pull_and_5x_pop_groups_share_a_topic(
    server: StandaloneServer, clients: Clients
) -> None:
    """A POP group and a 4.x pull group (the C++ client) of the same topic
    each get every message."""
    topic = make_topic(server)
    sent = send(server, topic, 20, prefix="shared")
    out = consume(server, "simple", topic=topic, group=make_group(server), want=20,
                  invisible_s=20, mode="ack")  # fmt: skip
    pulled = pull_walk(clients.pull_consumer(unique("GID_pull_shared")), topic, timeout=WAIT)
    want = sorted(s["body"] for s in sent)
    assert sorted(o["recv"] for o in received(out)) == want
    assert sorted(r.body.decode() for r in pulled) == want


def test_admin_sees_5x_consumers(server: StandaloneServer) -> None:
    """mqadmin consumerConnection lists a 5.x SimpleConsumer and
    consumerStatus answers with what it reported (running_info.py)."""
    topic, group = make_topic(server), make_group(server)
    consumer = sdk5.start("simple", endpoint=server.grpc, topic=topic, group=group, want=1,
                          seconds=WAIT, invisible_s=20, mode="ack", expr="TagZ")  # fmt: skip
    try:
        admin_cmd = [sys.executable, "-m", "pyrmq", "admin"]
        conn_cmd = [*admin_cmd, "consumerConnection", "--json", "-n", server.namesrv, "-g", group]
        deadline = time.monotonic() + WAIT
        conns: Any = {}
        while time.monotonic() < deadline:
            r = subprocess.run(conn_cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                conns = json.loads(r.stdout)
                if conns.get("connectionSet"):
                    break
            time.sleep(0.5)
        assert [c["language"] for c in conns.get("connectionSet", [])] == ["PYTHON"], (conns, r)
        assert conns["subscriptionTable"][topic]["subString"] == "TagZ"
        status_cmd = [*admin_cmd, "consumerStatus", "--json", "-n", server.namesrv, "-g", group]
        r = subprocess.run(status_cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r
        (status,) = json.loads(r.stdout)
        info = status["runningInfo"]
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_POP", info
        assert info["properties"]["PROP_CLIENT_LANGUAGE"] == "PYTHON"
        assert [s["topic"] for s in info["subscriptionSet"]] == [topic]
    finally:
        consumer.kill()
        consumer.communicate(timeout=30)
