"""The per-message part of auto-batching in C (rmqcore.SendBatch,
rmqcore.SlotsBuilder): each caller of a batch gets the SendResult the
dataclass would have made for it, on its future and in its callback, once;
a cancelled caller is left cancelled; a raising callback is logged and
the callers after it are still settled; a failed batch's error reaches
every caller and is never reported as unretrieved where a callback took
it. The batches' way over a real broker is tests/client/test_auto_batch.py."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqcore
from pyrmq.common.errors import ClientError
from pyrmq.common.message import Message, MessageQueue
from pyrmq.common.results import SendResult, SendStatus, new_send_result
from pyrmq.producer import Producer

log = logging.getLogger("test.send_batch_core")
MQ = MessageQueue("t", "broker-a", 3)


def test_slots_builder_makes_what_the_dataclass_makes():
    args = (SendStatus.FLUSH_DISK_TIMEOUT, "u", "o", MQ, 7, "tx", "region")
    made = new_send_result(*args)
    assert made == SendResult(*args)
    assert type(made) is SendResult
    assert hash(made) == hash(SendResult(*args))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.msg_id = "x"  # type: ignore[misc]
    assert gc.is_tracked(made)


def test_slots_builder_refuses_what_it_cannot_build():
    class WithDict:
        x: int

    @dataclasses.dataclass(slots=True)
    class Two:
        a: int
        b: int

    with pytest.raises(TypeError, match="__slots__"):
        rmqcore.SlotsBuilder(WithDict, ["x"])
    with pytest.raises(TypeError, match="exactly"):
        rmqcore.SlotsBuilder(Two, ["a"])
    with pytest.raises(TypeError, match="exactly"):
        rmqcore.SlotsBuilder(Two, ["a", "c"])
    make = rmqcore.SlotsBuilder(Two, ["b", "a"])
    assert make(1, 2) == Two(2, 1)
    with pytest.raises(TypeError, match="takes 2 values, got 3"):
        make(1, 2, 3)


def _batch(n: int, with_cb: list[bool], got: list[list[tuple]]) -> rmqcore.SendBatch:
    loop = asyncio.get_running_loop()
    b = rmqcore.SendBatch(loop.time(), 3.0, 2)
    for i in range(n):
        cb = None
        if with_cb[i]:

            def cb(r, e, i=i):
                got[i].append((r, e))
                if r is not None and r.queue_offset == 1000 + 5:
                    raise RuntimeError("a caller's callback raised")

        assert b.add(Message("t", b"x"), loop.create_future(), cb, i % 2 == 0, 10, None, 2) == i + 1
    return b


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40),
    st.sampled_from([1000, -1]),
    st.booleans(),
)
def test_each_caller_gets_its_own_result_once(entries, first, offsets_known):
    n = len(entries)
    with_cb = [c for c, _ in entries]
    cancel = [x for _, x in entries]

    async def main() -> None:
        got: list[list[tuple]] = [[] for _ in range(n)]
        b = _batch(n, with_cb, got)
        assert len(b) == n and b.counted_total == (n + 1) // 2 and b.size == 10 * n
        for out, c in zip(b.outs, cancel, strict=True):
            if c:
                out.cancel()
        uniq = ",".join(f"U{i}" for i in range(n))
        offsets = ",".join(f"O{i}" for i in range(n)) if offsets_known else "O-batch"
        traced: list[tuple] = []

        class Tracer:
            def append_pub(self, msg, r, addr, born, cost):
                traced.append((msg, r, addr, born, cost))

        b.settle(
            new_send_result, SendStatus.SEND_OK, uniq, offsets, MQ, first, None, "r",
            Tracer(), "addr", 11, 12, log,
        )  # fmt: skip
        for i in range(n):
            want = SendResult(
                SendStatus.SEND_OK,
                f"U{i}",
                f"O{i}" if offsets_known else ("O-batch" if n == 1 else ""),
                MQ,
                first + i if first >= 0 else first,
                None,
                "r",
            )
            out = b.outs[i]
            if cancel[i]:
                assert out.cancelled()
            else:
                assert out.result() == want
            assert got[i] == ([(want, None)] if with_cb[i] else [])
            assert traced[i] == (b.msgs[i], want, "addr", 11, 12)
        assert len(traced) == n

    asyncio.run(main())


def test_a_raising_callback_is_logged_and_the_rest_settled(caplog):
    async def main() -> None:
        got: list[list[tuple]] = [[] for _ in range(8)]
        b = _batch(8, [True] * 8, got)
        uniq = ",".join("U" for _ in range(8))
        b.settle(new_send_result, SendStatus.SEND_OK, uniq, "", MQ, 1000, None, None,
                 None, "", 0, 0, log)  # fmt: skip
        assert all(len(g) == 1 for g in got)
        assert all(out.done() for out in b.outs)

    with caplog.at_level(logging.ERROR, logger=log.name):
        asyncio.run(main())
    assert [r.message for r in caplog.records] == ["send callback raised"]


def test_ids_that_do_not_match_the_batch_raise():
    async def main() -> None:
        b = _batch(3, [False] * 3, [[], [], []])
        with pytest.raises(ValueError, match="2 unique ids for 3 messages"):
            b.settle(new_send_result, SendStatus.SEND_OK, "a,b", "", MQ, 0, None, None,
                     None, "", 0, 0, log)  # fmt: skip
        assert not any(out.done() for out in b.outs)

    asyncio.run(main())


def test_a_failed_batch_reaches_every_caller():
    unretrieved: list[dict] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: unretrieved.append(ctx))
        got: list[list[tuple]] = [[] for _ in range(6)]
        with_cb = [True, False, True, True, False, True]
        b = _batch(6, with_cb, got)
        b.outs[2].cancel()
        error = ConnectionError("the broker went away")
        b.fail(error, log)
        assert b.outs[2].cancelled() and got[2] == [(None, error)]
        for i in (0, 3, 5):  # not read here: fail() marked them retrieved
            assert b.outs[i].done() and got[i] == [(None, error)]
        for i in (1, 4):
            assert b.outs[i].exception() is error and got[i] == []
        assert b.entry(0)[2] is not None
        assert b.entry(1) == (b.msgs[1], b.outs[1], None, False)
        del b
        gc.collect()

    asyncio.run(main())
    gc.collect()
    assert unretrieved == []


def _lone_producer() -> Producer:
    """A Producer never started (no server: offer() is what is tested)."""
    return Producer("send-batch-core", "127.0.0.1:9", auto_batch=True)


def _timed() -> Message:
    m = Message("t", b"x")
    m.deliver_time_ms = 4_102_444_800_000
    return m


def _with(props: dict[str, object]) -> Message:
    m = Message("t", b"x")
    m.properties.update(props)  # type: ignore[arg-type]
    return m


@pytest.mark.parametrize(
    "msg",
    [
        pytest.param(Message("t", b"x", delay_level=2), id="delayed"),
        pytest.param(_timed(), id="timer"),
        pytest.param(_with({"TIMER_DELAY_SEC": "5"}), id="timer-delay"),
        pytest.param(_with({"__STARTDELIVERTIME": "1"}), id="start-deliver-time"),
        pytest.param(_with({"TRAN_MSG": "true"}), id="transaction-half"),
        pytest.param(Message("t", b"x", wait_store_msg_ok=False), id="wait-false"),
        pytest.param(Message("%RETRY%g", b"x"), id="retry-topic"),
        pytest.param(Message("t", b"z" * 4096), id="compressed-body"),
        pytest.param(_with({"K": "v" * 40_000}), id="over-max-bytes"),
        pytest.param(_with({"K": 7}), id="a-property-not-a-str"),
        pytest.param(type("MyMessage", (Message,), {})("t", b"x"), id="a-message-subclass"),
    ],
)
def test_what_offer_sends_alone(msg):
    async def main() -> None:
        p = _lone_producer()
        p._loop = asyncio.get_running_loop()
        acc = p.accumulator
        assert acc is not None
        acc._busy["t"] = acc._busy["%RETRY%g"] = 1  # a batch would open
        assert acc.offer(msg, None, None, None, None, 2, None, True) is None
        assert acc._open == {} and p._inflight == 0

    asyncio.run(main())


def test_what_offer_batches_and_what_it_refuses():
    async def main() -> None:
        p = _lone_producer()
        p._loop = asyncio.get_running_loop()
        acc = p.accumulator
        assert acc is not None
        acc._busy["t"] = 1
        tagged = Message("t", b"x", tags="TagA", keys=["k1", "k2"])
        waits = Message("t", b"y", wait_store_msg_ok=True)
        futs = [acc.offer(m, None, None, None, None, 2, None, True) for m in (tagged, waits)]
        assert all(isinstance(f, asyncio.Future) for f in futs)
        batch = acc._open["t"]
        assert batch.msgs == [tagged, waits] and p._inflight == 2
        props = len("TAGS") + len("TagA") + len("KEYS") + len("k1 k2") + 4
        assert batch.size == 2 * rmqcore.BATCH_ENTRY_FIXED + 2 + props + 2 * 42
        with pytest.raises(ClientError, match="body is empty"):
            acc.offer(Message("t", b""), None, None, None, None, 2, None, True)
        with pytest.raises(ClientError, match="not valid"):
            acc.offer(Message("bad topic", b"x"), None, None, None, None, 2, None, True)
        with pytest.raises(ClientError, match="not a queue of topic 't'"):
            acc.offer(
                Message("t", b"x"), MessageQueue("u", "b", 0), None, None, None, 2, None, True
            )
        batch.handle.cancel()
        for f in futs:
            f.cancel()

    asyncio.run(main())
