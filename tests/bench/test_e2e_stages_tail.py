"""bench.e2e_stages: each message followed stage by stage (stages), and
the slowest 1% of the messages followed with the median of each of their
stages (_tail)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.e2e_stages import STAGES, _tail, _write_kind, stages
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.command import RemotingCommand

A, B, C = (name for _, _, name in STAGES[:3])


def test_tail_takes_the_messages_at_or_above_the_p99_and_their_stage_medians():
    # 200 messages of 1..200 µs; stage A takes the whole time, stage B a
    # tenth of it, and only the even messages have a C
    each = [
        (t * 1000, {A: t * 1000, B: t * 100, **({C: 7000} if t % 2 == 0 else {})})
        for t in range(1, 201)
    ]
    tail = _tail(each)
    # the p99 of 200 ascending totals is the 199th: 199 and 200 are the tail
    assert tail["messages"] == 2
    assert tail["from_us"] == 199.0
    # the median of two is the upper one (as every percentile here)
    assert tail["stages"] == {A: 200.0, B: 20.0, C: 7.0}


def test_tail_of_nothing_followed():
    assert _tail([]) == {"messages": 0, "stages": {}}


def _timelines(
    n: int, one_connection: bool = False
) -> tuple[list[Any], list[Any], list[tuple[int, int]]]:
    """n messages 1 ms apart, each taking the path the broker writes today.
    Two connections (the producer's ends fds 7 and 20, the consumer's 9
    and 21), stamped as before writes were labelled (each one "W"): the
    woken pull's answer (495 B) before the producer's ack (256 B). One
    connection (7 and 20), writes labelled as stamped now: the answer and
    the ack in one write."""
    client: list[Any] = []
    broker: list[Any] = []
    seen = []
    consumer_fd, broker_consumer_fd = (7, 20) if one_connection else (9, 21)
    for i in range(n):
        t = (i + 1) * 1_000_000
        client += [
            (t + 1_000, "send_async", 0, -1),
            (t + 30_000, "Wsend" if one_connection else "W", 480, 7),
            (t + 150_000, "R", 0, consumer_fd),  # the pull's answer (and the ack)
            (t + 160_000, "pulled", 0, -1),
            *([] if one_connection else [(t + 170_000, "R", 0, 7)]),  # the ack
            (t + 200_000, "Wpull" if one_connection else "W", 390, consumer_fd),  # the next pull
        ]
        if one_connection:
            answers = [(t + 90_000, "Wanswer+ack", 751, 20)]
        else:
            answers = [(t + 90_000, "W", 495, 21), (t + 110_000, "W", 256, 20)]
        broker += [
            (t + 50_000, "R", 0, 20),
            (t + 55_000, "split", 0, -1),
            (t + 70_000, "settle", 0, -1),
            (t + 78_000, "wake", 0, -1),
            *answers,
            (t + 230_000, "R", 0, broker_consumer_fd),  # the next pull arrives
        ]
        seen.append((t + 190_000, t))
    return client, broker, seen


@pytest.mark.parametrize(
    ("one_connection", "answer_to_ack"),
    [(False, 20.0), (True, 0.0)],
    ids=["two connections, by frame sizes", "one connection, by what each write carries"],
)
def test_stages_follow_each_message_through_the_pull_answer_written_before_the_ack(
    one_connection: bool, answer_to_ack: float
) -> None:
    client, broker, seen = _timelines(5, one_connection)
    doc = stages(client, broker, seen)
    assert doc["followed"] == 5
    p50 = {name: row["p50_us"] for name, row in doc["stages"].items()}
    assert p50 == {
        "client: stamped -> send_async called": 1.0,
        "client: send_async -> the send's write": 29.0,
        "the broker wakes and reads it": 20.0,
        "broker: read -> C split": 5.0,
        "broker: checks, C put -> settle": 15.0,
        "broker: settle -> held pulls woken": 8.0,
        "broker: woken -> pull answer written": 12.0,
        "broker: pull answer written -> ack written": answer_to_ack,
        "client: pull answer written -> read": 60.0,
        "client: ack written -> ack read": 60.0,
        "client: pull answer read -> _pulled": 10.0,
        "client: _pulled -> the listener sees it": 30.0,
        "total": 190.0,
    }


def test_writes_are_told_by_what_they_carry():
    def frame(code: int, ext: dict[str, str], flag: int = 0) -> bytes:
        cmd = RemotingCommand(code, ext, b"body")
        cmd.flag = flag
        return cmd.encode()

    send_v2 = frame(RC.SEND_MESSAGE_V2, {"a": "group", "b": "T"})
    send_v1 = frame(RC.SEND_MESSAGE, {"producerGroup": "group", "topic": "T"})
    batch = frame(RC.SEND_BATCH_MESSAGE, {"a": "group", "b": "T"})
    pull = frame(RC.PULL_MESSAGE, {"consumerGroup": "g", "queueOffset": "0"})
    answer = frame(0, {"nextBeginOffset": "2", "minOffset": "0"}, flag=1)
    ack = frame(0, {"msgId": "AB", "queueOffset": "1"}, flag=1)
    heartbeat = frame(RC.HEART_BEAT, {})
    kinds = [_write_kind(f) for f in (send_v2, send_v1, batch, pull, answer, ack, heartbeat)]
    assert kinds == [
        "Wsend",
        "Wsend",
        "Wsend",
        "Wpull",
        "Wanswer",
        "Wack",
        "W",
    ]
    assert _write_kind(memoryview(answer + ack)) == "Wanswer+ack"
