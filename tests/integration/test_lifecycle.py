"""Broker lifecycle over the wire: a restart right after a topic change
keeps the topic table (and the shutdown itself succeeds)."""

from __future__ import annotations

import json

from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, simple


def test_stop_right_after_topic_changes(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            for i in range(25):
                r = await simple(
                    cl,
                    c.broker_addr,
                    RC.UPDATE_AND_CREATE_TOPIC,
                    topic=f"Life{i}",
                    readQueueNums=2,
                    writeQueueNums=2,
                    perm=6,
                )
                assert r.code == R.SUCCESS, r
                # the broker now saves topics.json and re-registers in the
                # background; stop it at once
                await c.stop_broker()
                await c.start_broker()
                cfg = json.loads((await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)).body)
                missing = [
                    f"Life{j}" for j in range(i + 1) if f"Life{j}" not in cfg["topicConfigTable"]
                ]
                assert not missing, (i, missing)

    arun(main(), timeout=60)
