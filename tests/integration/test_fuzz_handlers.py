"""Random requests to every request code the NameServer and Broker serve
(their processor tables, read from the running servers, and one unknown
code): header fields from the real vocabulary with hostile values, bodies
from valid to garbage, half of them a valid request of the code
(tests/integration/fuzz_vocabulary.py) with hostile values put in. Each
gets an answer; none is an unhandled Python error (a processor must turn
bad input into a RocketMQ code with a remark); no processor logs a
traceback; afterwards the broker's settings are as before once the runtime
keys UPDATE_BROKER_CONFIG may legitimately change are set back (no other
key changed), and the broker still stores and serves messages, what it
stored before intact. PYRMQ_FUZZ_REQUESTS raises the count (1,500 by
default), PYRMQ_FUZZ_SEED changes the sequence."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re

import rmqcore
from pyrmq.common.errors import RemotingError
from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .fuzz_vocabulary import (
    BODIES,
    BROKER_FLOOR,
    KEYS,
    NAMESRV_FLOOR,
    UNKNOWN_CODE,
    VALUES,
    Template,
    broker_config,
    broker_templates,
    by_code,
    missing_templates,
    namesrv_templates,
    restore_broker_config,
    served_codes,
)
from .helpers import cluster, pull, send_ok

N = int(os.environ.get("PYRMQ_FUZZ_REQUESTS", "1500"))
# The answer Connection gives when a processor raised something unexpected.
UNHANDLED = re.compile(r"^[A-Z]\w*(Error|Exception): ")
#: seconds an answer may take before the request counts as unanswered
ANSWER_TIMEOUT = 5.0
#: how long a pull or a pop may be held (long polling: the broker's cap is 20 s)
PULL_TIMEOUT = 30.0
#: after the run, seconds granted to pulls still held before they are
#: dropped unjudged (a held pull is no fault; the chaos fuzzer does the same)
HELD_GRACE = 2.0


def test_served_codes_are_derived_and_every_one_has_a_template(arun, tmp_path):
    """The code lists come from the servers' processor tables; they hold at
    least the admin, transaction, ACL and HA codes, and each served code
    has a valid request in the vocabulary to start mutations from (add one
    to fuzz_vocabulary.py with a new request code)."""

    async def main() -> tuple[list[int], list[int]]:
        async with cluster(tmp_path) as (c, _):
            return served_codes(c.broker.server), served_codes(c.namesrv.server)

    broker_codes, namesrv_codes = arun(main())
    assert UNKNOWN_CODE in broker_codes and UNKNOWN_CODE in namesrv_codes
    assert sorted(BROKER_FLOOR - set(broker_codes)) == []
    assert sorted(NAMESRV_FLOOR - set(namesrv_codes)) == []
    assert missing_templates(broker_codes, broker_templates()) == []
    assert missing_templates(namesrv_codes, namesrv_templates()) == []


def request(rng: random.Random, code: int, templates: dict[int, list[Template]]) -> RemotingCommand:
    """A request of code: a valid one with hostile values put in, or random
    fields and a random body."""
    if code in templates and rng.random() < 0.5:
        _, ext, body = rng.choice(templates[code])
        ext = dict(ext)
        for _ in range(rng.randrange(4)):
            op = rng.random()
            if op < 0.15 and ext:
                del ext[rng.choice(list(ext))]
            elif op < 0.8 and ext:
                ext[rng.choice(list(ext))] = rng.choice(VALUES)
            else:
                ext[rng.choice(KEYS)] = rng.choice(VALUES)
        if rng.random() < 0.3:
            body = rng.choice(BODIES)
        return RemotingCommand(code, ext, body)
    ext = {rng.choice(KEYS): rng.choice(VALUES) for _ in range(rng.randrange(10))}
    return RemotingCommand(code, ext, rng.choice(BODIES))


def test_random_requests_get_clear_answers_and_break_nothing(arun, tmp_path, caplog):
    rng = random.Random(int(os.environ.get("PYRMQ_FUZZ_SEED", "20261122")))

    async def main() -> dict[str, int]:
        async with cluster(tmp_path, max_message_size=64 * 1024) as (c, cl):
            broker_codes = served_codes(c.broker.server)
            namesrv_codes = served_codes(c.namesrv.server)
            bt, nt = by_code(broker_templates()), by_code(namesrv_templates())
            before = await send_ok(cl, c.broker_addr, "FuzzKeep", b"kept")
            config = await broker_config(cl, c.broker_addr)
            unhandled = []
            pulls: dict[asyncio.Task[RemotingCommand], tuple[int, RemotingCommand]] = {}
            for i in range(N):
                to_namesrv = rng.random() < 0.3
                code = rng.choice(namesrv_codes if to_namesrv else broker_codes)
                cmd = request(rng, code, nt if to_namesrv else bt)
                addr = c.namesrv_addr if to_namesrv else c.broker_addr
                if code in (RC.PULL_MESSAGE, RC.POP_MESSAGE) and not to_namesrv:
                    # may be held (long polling): judged when answered
                    pulls[asyncio.create_task(cl.invoke(addr, cmd, PULL_TIMEOUT))] = (i, cmd)
                    continue
                try:
                    r = await cl.invoke(addr, cmd, ANSWER_TIMEOUT)
                except RemotingError as e:  # no answer: a client would hang
                    unhandled.append((i, code, cmd.ext_fields, cmd.body[:200], repr(e)))
                    continue
                if r.code == R.SYSTEM_ERROR and UNHANDLED.match(r.remark or ""):
                    unhandled.append((i, code, cmd.ext_fields, cmd.body[:200], r.remark))
            held = 0
            if pulls:
                done, still = await asyncio.wait(pulls, timeout=HELD_GRACE)
                for t in still:
                    t.cancel()
                await asyncio.gather(*still, return_exceptions=True)
                held = len(still)
                for t in done:
                    try:
                        r = t.result()
                    except RemotingError as e:
                        r = RemotingCommand(R.SYSTEM_ERROR, remark=f"RemotingError: {e}")
                    if r.code == R.SYSTEM_ERROR and UNHANDLED.match(r.remark or ""):
                        i, cmd = pulls[t]
                        unhandled.append((i, cmd.code, cmd.ext_fields, b"", r.remark))
            assert unhandled == [], "\n".join(map(repr, unhandled[:20]))
            # What the fuzz changed legitimately is set back; nothing else changed.
            restored = await restore_broker_config(cl, c.broker_addr, config)
            # Still serving, and what was stored before is intact.
            after = await send_ok(cl, c.broker_addr, "FuzzKeep", b"after")
            r = await pull(cl, c.broker_addr, "FuzzKeep", 0, 0)
            bodies = [m["body"] for m in rmqcore.decode_records(r.body)]
            assert bodies == [b"kept", b"after"], (before, after, bodies)
            return {"pulls": len(pulls), "held": held, "restored": len(restored)}

    with caplog.at_level(logging.ERROR, logger="pyrmq"):
        figures = arun(main(), timeout=max(120.0, N / 100))
    print(f"fuzz: {N} requests, {figures}")
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == []
