"""bench.e2e_stages._tail: the slowest 1% of the messages followed, and
the median of each of their stages."""

from __future__ import annotations

from bench.e2e_stages import STAGES, _tail

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
