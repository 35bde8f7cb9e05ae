"""pyrmq.sync: the blocking Producer / PushConsumer / PullConsumer, used from
plain threads and from processes forked after the parent used them, plus
the asyncio client on uvloop.

The broker is a `pyrmq standalone` subprocess (NameServer + Broker on
127.0.0.1, ephemeral ports), so this process holds no event loop but the
facade's own and forks cleanly. Every wait is bounded."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import pathlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pyrmq import (
    ClientError,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    SendStatus,
)
from pyrmq import sync as rmq_sync
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess

REPO = pathlib.Path(__file__).resolve().parents[2]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
READY_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # transactions checked every 200 ms, 300 ms after they were born
    conf = {**SMALL_STORE, "transactionCheckInterval": 200, "transactionTimeOut": 300}
    srv = StandaloneProcess(tmp_path_factory.mktemp("sync-standalone"), conf)
    srv.start()
    try:
        yield srv.namesrv
    finally:
        srv.stop()


def wait_until(pred: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def wait_routed(producer: rmq_sync.Producer, topic: str) -> None:
    """The broker registers an auto-created topic a moment after its first
    message; consumers started before that wait for a route refresh."""
    wait_until(
        lambda: rmq_sync.run(producer.client.api.get_topic_route(topic)) is not None,
        f"a route for {topic}",
    )


def poll_until(pc: rmq_sync.PullConsumer, n: int, timeout: float = 15.0) -> list[MessageExt]:
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"polled {len(out)} of {n} messages in {timeout}s")
        out.extend(pc.poll(min(left, 0.5)))
    return out


# -- plain threads ---------------------------------------------------------------------------


def test_blocking_transaction_producer(namesrv):
    """execute_local_transaction runs in the caller's thread, the check in a
    worker thread (never the loop's); a commit, a rollback, and an unknown
    outcome a check then commits: only the committed two are consumed."""
    topic = "SyncTxT"
    caller = threading.get_ident()
    threads: dict[str, set[str]] = {"execute": set(), "check": set()}

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            threads["execute"].add(threading.current_thread().name)
            assert threading.get_ident() == caller
            return arg

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            threads["check"].add(threading.current_thread().name)
            return LocalTransactionState.COMMIT_MESSAGE

    with rmq_sync.Producer("sync-tx-setup", namesrv) as setup:
        setup.send(Message(topic, b"first"))
        wait_routed(setup, topic)
    with rmq_sync.TransactionProducer(
        "sync-tx", namesrv, transaction_listener=Listener()
    ) as producer:
        states = [
            LocalTransactionState.COMMIT_MESSAGE,
            LocalTransactionState.ROLLBACK_MESSAGE,
            LocalTransactionState.UNKNOW,
        ]
        for i, state in enumerate(states):
            r = producer.send_message_in_transaction(Message(topic, f"tx{i}".encode()), state)
            assert r.send_status is SendStatus.SEND_OK and r.local_transaction_state is state
        pull = rmq_sync.PullConsumer("sync-tx-reader", namesrv, consume_from_where=FIRST)
        pull.subscribe(topic)
        with pull:
            got = sorted(m.body for m in poll_until(pull, 3))
            assert pull.poll(1.0) == []
    assert got == [b"first", b"tx0", b"tx2"]
    assert threads["execute"] == {threading.current_thread().name}
    assert threads["check"] and "pyrmq-loop" not in threads["check"], threads


def test_producer_and_consumers_from_plain_threads(namesrv):
    topic = "SyncThreadsT"
    bodies = [f"t{t}-{i}" for t in range(4) for i in range(5)]
    results: list[Any] = []
    errors: list[BaseException] = []
    with rmq_sync.Producer("sync-pg", namesrv) as producer:

        def sender(t: int) -> None:
            try:
                for i in range(5):
                    results.append(producer.send(Message(topic, f"t{t}-{i}".encode())))
            except BaseException as e:  # reported below, in the test thread
                errors.append(e)

        threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        assert not errors, errors
        assert [r.send_status for r in results] == [SendStatus.SEND_OK] * 20
        wait_routed(producer, topic)

        got: list[str] = []
        names: set[str] = set()
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], ctx: Any) -> None:
            with lock:
                got.extend(m.body.decode() for m in msgs)
                names.add(threading.current_thread().name)

        push = rmq_sync.PushConsumer("sync-push", namesrv, consume_from_where=FIRST)
        push.subscribe(topic)
        push.register_message_listener(listener)
        with push:
            wait_until(lambda: len(got) >= 20, "the push consumer")
            producer.send(Message(topic, b"late"))
            wait_until(lambda: "late" in got, "a message sent while running")
        assert sorted(got) == sorted([*bodies, "late"])
        assert all(n.startswith("pyrmq-consume-sync-push") for n in names), names

        pull = rmq_sync.PullConsumer("sync-pull", namesrv, consume_from_where=FIRST)
        pull.subscribe(topic)
        with pull:
            polled = poll_until(pull, 21)
            pull.commit()
            queues = pull.assignment()
            pull.pause(queues)
            producer.send(Message(topic, b"while-paused"))
            assert pull.poll(0.5) == []
            pull.resume(queues)
            resumed = poll_until(pull, 1)
        assert sorted(m.body.decode() for m in polled) == sorted([*bodies, "late"])
        assert [m.body for m in resumed] == [b"while-paused"]


def test_run_refuses_to_block_its_own_loop(namesrv):
    with rmq_sync.Producer("sync-pg-loop", namesrv) as producer:

        async def inside() -> None:
            producer.send(Message("SyncLoopT", b"x"))  # would wait for its own loop

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ClientError):
                rmq_sync.run(inside(), timeout=10)
            gc.collect()
        # the refused send's coroutine was closed, not left "never awaited"
        assert not [w for w in caught if "never awaited" in str(w.message)], caught


# -- fork ------------------------------------------------------------------------------------


def _send_in_child(namesrv: str, topic: str, out: Any) -> None:
    try:
        with rmq_sync.Producer("sync-child-pg", namesrv) as producer:
            r = producer.send(Message(topic, f"child-{os.getpid()}".encode()))
            out.put(("ok", r.send_status.name, os.getpid()))
    except BaseException as e:
        out.put(("error", repr(e), os.getpid()))


def _use_parents_producer(producer: rmq_sync.Producer, topic: str, out: Any) -> None:
    try:
        producer.send(Message(topic, b"must-not-be-sent"))
        out.put(("sent", "", os.getpid()))
    except ClientError as e:
        out.put(("ClientError", str(e), os.getpid()))
    except BaseException as e:
        out.put(("other", repr(e), os.getpid()))


def run_in_fork(target: Callable[..., None], *args: Any) -> tuple[str, str, int]:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    try:
        result = out.get(timeout=60)
    finally:
        proc.join(30)
        if proc.exitcode is None:
            proc.kill()
            proc.join(10)
    assert proc.exitcode == 0, proc.exitcode
    assert result[2] == proc.pid and proc.pid != os.getpid()
    return result


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork()")
def test_producer_created_in_a_forked_child_sends(namesrv):
    topic = "SyncForkT"
    with rmq_sync.Producer("sync-parent-pg", namesrv) as producer:
        # the parent has used pyrmq.sync: its loop thread runs now
        assert producer.send(Message(topic, b"parent")).send_status is SendStatus.SEND_OK
        wait_routed(producer, topic)
        status, detail, pid = run_in_fork(_send_in_child, namesrv, topic)
        assert (status, detail) == ("ok", "SEND_OK")
        # and the parent's producer still works after the fork
        assert producer.send(Message(topic, b"parent-again")).send_status is SendStatus.SEND_OK
    pull = rmq_sync.PullConsumer("sync-fork-reader", namesrv, consume_from_where=FIRST)
    pull.subscribe(topic)
    with pull:
        got = sorted(m.body.decode() for m in poll_until(pull, 3))
    assert got == sorted(["parent", "parent-again", f"child-{pid}"])


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork()")
def test_a_facade_object_used_in_a_child_after_fork_raises(namesrv):
    topic = "SyncForkMisuseT"
    with rmq_sync.Producer("sync-parent-pg2", namesrv) as producer:
        producer.send(Message(topic, b"parent"))
        status, detail, _ = run_in_fork(_use_parents_producer, producer, topic)
        assert status == "ClientError", detail
        assert "fork" in detail
        assert producer.send(Message(topic, b"still-fine")).send_status is SendStatus.SEND_OK


# -- uvloop ----------------------------------------------------------------------------------


def test_asyncio_client_on_uvloop(namesrv):
    uvloop = pytest.importorskip("uvloop")
    from pyrmq import Producer, PushConsumer

    topic = "UvloopT"

    async def main() -> list[str]:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        got: list[str] = []

        async def listener(msgs: list[MessageExt], ctx: Any) -> None:
            got.extend(m.body.decode() for m in msgs)

        async with Producer("uv-pg", namesrv) as producer:
            for i in range(10):
                await producer.send(Message(topic, f"u{i}".encode()))
            while await producer.client.api.get_topic_route(topic) is None:
                await asyncio.sleep(0.01)
            consumer = PushConsumer("uv-group", namesrv, consume_from_where=FIRST)
            consumer.subscribe(topic)
            consumer.register_message_listener(listener)
            async with consumer:
                while len(got) < 10:
                    await asyncio.sleep(0.02)
        return got

    loop = uvloop.new_event_loop()
    try:
        got = loop.run_until_complete(asyncio.wait_for(main(), 30))
    finally:
        loop.close()
    assert sorted(got) == sorted(f"u{i}" for i in range(10))
