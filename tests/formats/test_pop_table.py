"""CheckpointTable (pyrmq/broker/pop/table.py) against a plain list of
checkpoints: whatever the order of adds, removes and looks, it finds the
same due checkpoints, queues and oldest revive log record. Also the
receipt handle's round trip and its refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.broker.pop.receipt import (
    Checkpoint,
    CkKey,
    InvalidReceiptHandle,
    decode,
    encode,
)
from pyrmq.broker.pop.table import CheckpointTable

keys = st.builds(
    CkKey,
    st.sampled_from(["g1", "g2"]),
    st.sampled_from(["T", "%RETRY%g1"]),
    st.integers(0, 2),
    st.integers(0, 20),
    st.integers(0, 5),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), keys, st.integers(1, 50), st.integers(0, 30)),
        st.tuples(st.just("remove"), keys),
        st.tuples(st.just("due"), st.integers(0, 60)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_table_matches_a_plain_list(program: list[tuple]) -> None:
    table = CheckpointTable()
    model: dict[CkKey, Checkpoint] = {}
    handed: set[CkKey] = set()  # due ones stay in the table until removed
    for op in program:
        if op[0] == "add":
            _, k, invisible, log_offset = op
            ck = Checkpoint(k, invisible, 0, False, log_offset)
            table.add(ck)
            model[k] = ck
            handed.discard(k)
        elif op[0] == "remove":
            got = table.remove(op[1])
            assert (got is None) == (op[1] not in model)
            model.pop(op[1], None)
            handed.discard(op[1])
        else:
            now = op[1]
            want = {k for k, c in model.items() if c.deadline_ms <= now and k not in handed}
            got = {c.key for c in table.due(now)}
            assert got == want
            handed |= got
        assert len(table) == len(model)
        low = min((c.log_offset for c in model.values()), default=None)
        assert table.min_log_offset() == low
        for k in model:
            assert k in table.queue(k.group, k.topic, k.queue_id)


def test_receipt_handles() -> None:
    ck = Checkpoint(CkKey("g", "%RETRY%g", 3, 17, 1_700_000_000_123), 30_000, 2, False)
    h = encode(ck, True, "broker-a")
    r = decode(h)
    assert (r.retry, r.queue_id, r.offset, r.pop_time, r.invisible_ms, r.broker_name) == (
        True, 3, 17, 1_700_000_000_123, 30_000, "broker-a",
    )  # fmt: skip
    for bad in ("", "v1", "v2 0 0 0 0 0 b", "v1 2 0 0 0 0 b", "v1 0 x 0 0 0 b", h + " extra"):
        with pytest.raises(InvalidReceiptHandle):
            decode(bad)
