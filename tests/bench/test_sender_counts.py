"""bench.pipelined.Sender counts the answers it is sent, however the
stream is cut: successes, failures, and nothing of a frame not yet whole.
The answers are the broker's own encoding (RemotingCommand.response), fed
to data_received in pieces; no socket, so that every cut can be tried."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.pipelined import Sender
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode


def _answers(codes: list[int]) -> bytes:
    out = []
    for i, code in enumerate(codes):
        req = RemotingCommand(RequestCode.SEND_MESSAGE, {}, opaque=i + 1)
        fields = {"msgId": f"{i:032X}", "queueId": "1", "queueOffset": str(i)}
        # a remark holding the header's own opening: JSON escapes its quotes
        remark = None if code == ResponseCode.SUCCESS else 'refused: {"code":0, "quoted"}'
        out.append(req.response(code, remark=remark, ext_fields=fields).encode())
    return b"".join(out)


@settings(max_examples=200, deadline=None)
@given(
    codes=st.lists(st.sampled_from([0, 0, 0, 1, 14, 17]), min_size=1, max_size=40),
    data=st.data(),
)
def test_counts_whole_answers_wherever_the_stream_is_cut(codes: list[int], data: st.DataObject):
    stream = _answers(codes)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=12)))

    async def make() -> Sender:
        return Sender(b"\0" * 8, 8, 0, 0)  # sends nothing: sending is off

    s = asyncio.run(make())
    s.outstanding = len(codes)
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        s.data_received(stream[a:b])
    assert s.ok == codes.count(0)
    assert s.bad == len(codes) - codes.count(0)
    assert s.outstanding == 0 and not s.buf
