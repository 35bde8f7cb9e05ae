"""The send path's handling of timed messages (pyrmq/broker/timer.py):
diverted to rmq_sys_wheel_timer until due, answered with the queue the
client chose, refused past timerMaxDelaySec, stored at once when due
already."""

from __future__ import annotations

import time

from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, max_offset, props, send


def test_timed_sends(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            now = int(time.time() * 1000)
            r = await send(cl, a, "TimedT", b"later", 1, props(TIMER_DELIVER_MS=now + 60_000))
            assert r.code == R.SUCCESS, r
            assert r.ext_fields["queueId"] == "1", "the answer names the queue the client chose"
            assert await max_offset(cl, a, "TimedT", 1) == 0, "not in its topic before it is due"
            assert await max_offset(cl, a, "rmq_sys_wheel_timer", 0) == 1
            r = await send(cl, a, "TimedT", b"now", 1, props(TIMER_DELIVER_MS=now - 5))
            assert r.code == R.SUCCESS and await max_offset(cl, a, "TimedT", 1) == 1
            for bad in (
                props(TIMER_DELIVER_MS=now + 4 * 86400_000),
                props(TIMER_DELAY_SEC=4 * 86400),
                props(TIMER_DELIVER_MS="soon"),
            ):
                r = await send(cl, a, "TimedT", b"x", 0, bad)
                assert r.code == R.MESSAGE_ILLEGAL, (bad, r)
                assert "timerMaxDelaySec" in r.remark or "integers" in r.remark, r.remark
            assert await max_offset(cl, a, "rmq_sys_wheel_timer", 0) == 1, "refusals not stored"

    arun(main())
