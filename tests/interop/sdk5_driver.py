"""Drives the official RocketMQ 5.x Python SDK (rocketmq-python-client) in a
process of its own, for tests/interop/test_sdk5_*.py. Not a test module:
run as ``python sdk5_driver.py VERB JSON-ARGS`` with the SDK on PYTHONPATH
(tests/interop/sdk5.py does that). Prints one JSON object per line: what
was sent, checked or failed. Imports nothing of pyrmq's.

Verbs:
  send     {endpoint, topic, n, async?, tag?, keys?, props?, group?, delay_s?}
           -> {"sent": i, "id": message_id, "offset": n, "body": text, "ms": a
           sync send's round trip} each
  tx       {endpoint, topic, n, resolution: commit|rollback|orphan}
           -> {"half": i, "id": ..., "tx": transaction_id} each, then the
           end of each; "orphan" ends none and leaves with os._exit
  checker  {endpoint, topic, seconds, answer: commit|rollback}
           -> {"checked": message_id} for each check the broker asks
  fail     {endpoint, topic, body?, props?} one send expected to fail
           -> {"error": text}
  simple   {endpoint, topic, group, want, seconds, invisible_s, expr?, sql?,
           mode: ack|noack|change|change-noack, change_s?, batch?, distinct?}
           SimpleConsumer receives until `want` messages were seen (or
           `seconds`; distinct: `want` different bodies, however many
           deliveries that took); ack: acks each; noack: never acks; change: changes
           each one's invisible time to change_s, then acks it (change-noack: not)
           -> {"recv": body, "id", "attempt", "topic", "tag", "t"} each,
           {"acked": id} / {"changed": id}, and {"error": text} on failures
  push     {endpoint, topic, group, want, seconds, fail_first?, expr?}
           PushConsumer; the listener answers FAILURE to a message's first
           `fail_first` deliveries, then SUCCESS
           -> {"recv": body, "id", "attempt", "t"} each delivery
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

_OUT = threading.Lock()


def out(**kw: object) -> None:
    """One JSON line (the SDK's callback threads print too: one at a time)."""
    line = json.dumps(kw)
    with _OUT:
        print(line, flush=True)


def producer(a: dict, checker=None):  # type: ignore[no-untyped-def]
    from rocketmq import ClientConfiguration, Credentials, Producer

    creds = Credentials(a.get("ak", ""), a.get("sk", ""))
    cfg = ClientConfiguration(a["endpoint"], creds, request_timeout=a.get("timeout", 10))
    p = Producer(cfg, (a["topic"],), checker) if checker else Producer(cfg, (a["topic"],))
    p.startup()
    return p


def message(a: dict, i: int, body: str):  # type: ignore[no-untyped-def]
    from rocketmq import Message

    m = Message()
    m.topic = a["topic"]
    m.body = body.encode()
    if a.get("tag"):
        m.tag = a["tag"]
    if a.get("keys"):
        m.keys = f"{a['keys']}-{i}"
    for k, v in (a.get("props") or {}).items():
        m.add_property(k, v)
    if a.get("group"):
        m.message_group = a["group"]
    if a.get("delay_s"):
        m.delivery_timestamp = int(time.time() + a["delay_s"])
    return m


def send(a: dict) -> None:
    p = producer(a)
    try:
        futures = []
        for i in range(a["n"]):
            body = f"{a.get('prefix', 'sdk5')}-{i}"
            m = message(a, i, body)
            if a.get("async"):
                futures.append((i, body, p.send_async(m)))
                continue
            t = time.perf_counter()
            r = p.send(m)
            ms = (time.perf_counter() - t) * 1000
            out(sent=i, id=r.message_id, offset=r.offset, body=body, ms=round(ms, 3))
        for i, body, f in futures:
            r = f.result(timeout=30)
            out(sent=i, id=r.message_id, offset=r.offset, body=body)
    finally:
        p.shutdown()


def tx(a: dict) -> None:
    p = producer(a, checker=_Checker("rollback"))
    try:
        txs = []
        for i in range(a["n"]):
            t = p.begin_transaction()
            body = f"{a.get('prefix', 'tx')}-{i}"
            r = p.send(message(a, i, body), t)
            out(half=i, id=r.message_id, tx=r.transaction_id, body=body)
            txs.append((i, t))
        if a["resolution"] == "orphan":
            os._exit(0)  # no end, no shutdown: the broker must ask someone else
        for i, t in txs:
            t.commit() if a["resolution"] == "commit" else t.rollback()
            out(ended=i, resolution=a["resolution"])
    finally:
        p.shutdown()


class _Checker:
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, msg):  # type: ignore[no-untyped-def]
        from rocketmq import TransactionResolution

        out(checked=msg.message_id, body=msg.body.decode(errors="replace"))
        return (
            TransactionResolution.COMMIT
            if self.answer == "commit"
            else TransactionResolution.ROLLBACK
        )


def checker(a: dict) -> None:
    from rocketmq import TransactionChecker

    class Checker(_Checker, TransactionChecker):
        pass

    p = producer(a, checker=Checker(a["answer"]))
    out(ready=True)
    try:
        stop = threading.Event()
        stop.wait(a["seconds"])
    finally:
        p.shutdown()


def fail(a: dict) -> None:
    p = producer(a)
    try:
        m = message(a, 0, a.get("body", "x"))
        try:
            r = p.send(m)
        except Exception as e:  # the SDK's own exception types
            out(error=f"{type(e).__name__}: {e}")
        else:
            out(unexpected=r.message_id)
    finally:
        p.shutdown()


def _subscription(a: dict):  # type: ignore[no-untyped-def]
    from rocketmq import FilterExpression
    from rocketmq.grpc_protocol import FilterType

    if a.get("sql"):
        return {a["topic"]: FilterExpression(a["sql"], FilterType.SQL)}
    return {a["topic"]: FilterExpression(a.get("expr", "*"))}


def _seen(m, **extra: object) -> None:  # type: ignore[no-untyped-def]
    out(
        recv=m.body.decode(errors="replace"),
        id=m.message_id,
        attempt=m.delivery_attempt,
        topic=m.topic,
        tag=m.tag,
        t=time.time(),
        **extra,
    )


def simple(a: dict) -> None:
    from rocketmq import ClientConfiguration, Credentials, SimpleConsumer

    creds = Credentials(a.get("ak", ""), a.get("sk", ""))
    cfg = ClientConfiguration(a["endpoint"], creds, request_timeout=10)
    c = SimpleConsumer(cfg, a["group"], _subscription(a), await_duration=a.get("await_s", 2))
    c.startup()
    out(ready=True)
    seen = 0
    bodies: set[bytes] = set()
    deadline = time.time() + a["seconds"]
    try:
        while (len(bodies) if a.get("distinct") else seen) < a["want"] and time.time() < deadline:
            try:
                msgs = c.receive(a.get("batch", 16), a["invisible_s"])
            except Exception as e:
                out(error=f"receive: {type(e).__name__}: {e}")
                time.sleep(0.2)
                continue
            for m in msgs:
                seen += 1
                bodies.add(m.body)
                _seen(m)
                try:
                    if a["mode"] in ("change", "change-noack"):
                        c.change_invisible_duration(m, a["change_s"])
                        out(changed=m.message_id, t=time.time())
                    if a["mode"] in ("ack", "change"):
                        c.ack(m)
                        out(acked=m.message_id)
                except Exception as e:
                    out(error=f"{a['mode']}: {type(e).__name__}: {e}")
    finally:
        c.shutdown()


def push(a: dict) -> None:
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        MessageListener,
        PushConsumer,
    )

    fail_first = a.get("fail_first", 0)
    seen = threading.Semaphore(0)

    class Listener(MessageListener):
        def consume(self, message):  # type: ignore[no-untyped-def]
            ok = message.delivery_attempt > fail_first
            _seen(message, ok=ok)
            if ok:
                seen.release()
            return ConsumeResult.SUCCESS if ok else ConsumeResult.FAILURE

    creds = Credentials(a.get("ak", ""), a.get("sk", ""))
    cfg = ClientConfiguration(a["endpoint"], creds, request_timeout=10)
    c = PushConsumer(cfg, a["group"], Listener(), _subscription(a))
    c.startup()
    out(ready=True)
    deadline = time.time() + a["seconds"]
    try:
        for _ in range(a["want"]):
            if not seen.acquire(timeout=max(deadline - time.time(), 0.01)):
                break
    finally:
        c.shutdown()


if __name__ == "__main__":
    verb, args = sys.argv[1], json.loads(sys.argv[2])
    verbs = {"send": send, "tx": tx, "checker": checker, "fail": fail}
    verbs |= {"simple": simple, "push": push}
    verbs[verb](args)
