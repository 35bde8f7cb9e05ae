"""bench.e2e_stages: each message followed stage by stage (stages), and
the slowest 1% of the messages followed with the median of each of their
stages (_tail)."""

from __future__ import annotations

from typing import Any

from bench.e2e_stages import STAGES, _tail, stages

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


def _timelines(n: int) -> tuple[list[Any], list[Any], list[tuple[int, int]]]:
    """n messages 1 ms apart, each taking the path the broker writes today:
    the woken pull's answer (495 B) before the producer's ack (256 B)."""
    client: list[Any] = []
    broker: list[Any] = []
    seen = []
    for i in range(n):
        t = (i + 1) * 1_000_000
        client += [
            (t + 1_000, "send_async", 0, -1),
            (t + 30_000, "W", 480, 7),  # the send
            (t + 150_000, "R", 0, 9),  # the pull's answer
            (t + 160_000, "pulled", 0, -1),
            (t + 170_000, "R", 0, 7),  # the ack
            (t + 200_000, "W", 390, 9),  # the next pull
        ]
        broker += [
            (t + 50_000, "R", 0, 20),
            (t + 55_000, "split", 0, -1),
            (t + 70_000, "settle", 0, -1),
            (t + 78_000, "wake", 0, -1),
            (t + 90_000, "W", 495, 21),
            (t + 110_000, "W", 256, 20),
            (t + 230_000, "R", 0, 21),  # the next pull arrives
        ]
        seen.append((t + 190_000, t))
    return client, broker, seen


def test_stages_follow_each_message_through_the_pull_answer_written_before_the_ack():
    client, broker, seen = _timelines(5)
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
        "broker: pull answer written -> ack written": 20.0,
        "client: pull answer written -> read": 60.0,
        "client: ack written -> ack read": 60.0,
        "client: pull answer read -> _pulled": 10.0,
        "client: _pulled -> the listener sees it": 30.0,
        "total": 190.0,
    }
