"""Random requests to every request code the NameServer and Broker serve:
header fields from the real vocabulary with hostile values, bodies from
valid to garbage. Each gets an answer; none is an unhandled Python error
(a processor must turn bad input into a RocketMQ code with a remark); no
processor logs a traceback; the broker then still stores and serves
messages. PYRMQ_FUZZ_REQUESTS raises the count (1,500 by default),
PYRMQ_FUZZ_SEED changes the sequence."""

from __future__ import annotations

import logging
import os
import random
import re

import rmqcore
from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, pull, send_ok

N = int(os.environ.get("PYRMQ_FUZZ_REQUESTS", "1500"))
KEYS = [
    "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "consumerGroup", "group",
    "offset", "delayLevel", "commitOffset", "suspendTimeoutMillis", "subscription",
    "properties", "bornTimestamp", "flag", "batch", "key", "maxNum", "beginTimestamp",
    "endTimestamp", "timestamp", "readQueueNums", "writeQueueNums", "perm", "producerGroup",
    "clientID", "defaultTopic", "defaultTopicQueueNums", "reconsumeTimes", "maxReconsumeTimes",
    "brokerName", "brokerAddr", "clusterName", "brokerId", "namespace", "value", "b", "e", "m",
    "_UNIQUE_KEY_QUERY", "bodyCrc32", "compressed", "expressionType",
]  # fmt: skip
VALUES = [
    "", "0", "1", "-1", "7", "abc", "FuzzT", "%RETRY%G", "%DLQ%G", "999999999999999999999",
    "-99999999999999999999", "true", "1.5", "*", "a || b", "TAGS\x01x\x02", "DELAY\x013\x02",
    "DELAY\x01zz\x02", "SCHEDULE_TOPIC_XXXX", "TBW102", "G", "x" * 300, "é✓", "\x00",
]  # fmt: skip
BODIES = [
    b"", b"{}", b"[]", b"null", b"7", b"\x00\x01garbage", b"x" * 5000,
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"FuzzT","subString":"a||b"}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":5}]}',
    b'{"consumerDataSet":7,"clientID":"c"}', b'{"clientID":"c","producerDataSet":[1,2]}',
    b'{"mqSet":5,"consumerGroup":"G","clientId":"c"}',
    b'{"mqSet":[{"topic":1}],"consumerGroup":"G","clientId":"c"}',
    b'{"mqSet":[{"topic":"FuzzT","brokerName":"b","queueId":0}],"consumerGroup":"G","clientId":"c"}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}',
    rmqcore.encode_batch([(b"m1", {"TAGS": "a"}, 0), (b"m2", b"", 0)]),
]  # fmt: skip
BROKER_CODES = [
    10,
    11,
    12,
    14,
    15,
    17,
    21,
    28,
    29,
    30,
    31,
    32,
    33,
    34,
    35,
    36,
    38,
    41,
    42,
    215,
    222,
    310,
    320,
    999,
]
NAMESRV_CODES = [100, 101, 102, 103, 104, 105, 106, 206, 216, 322, 999]
# The answer Connection gives when a processor raised something unexpected.
UNHANDLED = re.compile(r"^[A-Z]\w*(Error|Exception): ")


def test_random_requests_get_clear_answers_and_break_nothing(arun, tmp_path, caplog):
    rng = random.Random(int(os.environ.get("PYRMQ_FUZZ_SEED", "20261122")))

    async def main() -> None:
        async with cluster(tmp_path, max_message_size=64 * 1024) as (c, cl):
            before = await send_ok(cl, c.broker_addr, "FuzzKeep", b"kept")
            unhandled = []
            for i in range(N):
                to_namesrv = rng.random() < 0.3
                code = rng.choice(NAMESRV_CODES if to_namesrv else BROKER_CODES)
                ext = {rng.choice(KEYS): rng.choice(VALUES) for _ in range(rng.randrange(10))}
                cmd = RemotingCommand(code, ext, rng.choice(BODIES))
                addr = c.namesrv_addr if to_namesrv else c.broker_addr
                r = await cl.invoke(addr, cmd, 5.0)
                if r.code == R.SYSTEM_ERROR and UNHANDLED.match(r.remark or ""):
                    unhandled.append((i, code, ext, r.remark))
            assert unhandled == []
            # Still serving, and what was stored before is intact.
            after = await send_ok(cl, c.broker_addr, "FuzzKeep", b"after")
            r = await pull(cl, c.broker_addr, "FuzzKeep", 0, 0)
            bodies = [m["body"] for m in rmqcore.decode_records(r.body)]
            assert bodies == [b"kept", b"after"], (before, after, bodies)

    with caplog.at_level(logging.ERROR, logger="pyrmq"):
        arun(main(), timeout=max(120.0, N / 500))
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == []
