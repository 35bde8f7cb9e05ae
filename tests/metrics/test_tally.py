"""The counting structures on their own: the cap folds keys into _other,
the size and latency buckets, the rpc sample scaled back, and what the
remoting server tells its observer for each kind of answer."""

from __future__ import annotations

import asyncio

import pytest

from pyrmq.common.errors import BrokerError
from pyrmq.metrics import OTHER, BrokerTallies, RpcTally, Tally
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.command import FLAG_ONEWAY
from pyrmq.remoting.server import RemotingServer


def test_tally_caps_keys() -> None:
    t: Tally[str] = Tally(2, 3, OTHER)
    for i in range(10):
        c = t.counts.get(f"k{i}") or t.slot(f"k{i}")
        c[0] += 1
    assert sorted(t.counts) == [OTHER, "k0", "k1", "k2"]
    assert t.counts[OTHER][0] == 7


def test_sent_buckets_and_batches() -> None:
    t = BrokerTallies(10)
    t.sent("T", "normal", 1, 100)  # <= 1 KiB
    t.sent("T", "normal", 1, 2000)  # <= 4 KiB
    t.sent("T", "normal", 4, 4 * 600_000)  # a batch of 4 at 600 KB: <= 1 MiB
    t.sent("T", "delay", 1, 10)
    got = {(topic, kind): c for topic, kind, c in t.in_snapshot()}
    normal = got[("T", "normal")]
    assert normal[:2] == [6, 100 + 2000 + 2_400_000]
    assert normal[2:] == [1, 1, 0, 4, 0, 0, 0]
    assert got[("T", "delay")][:3] == [1, 10, 1]
    assert t.in_label_values() == 2


def test_rpc_sample_is_scaled_back() -> None:
    r = RpcTally(sample_every=16)
    r.observe(310, 0, "success", 500)  # 0.5 ms
    r.observe(310, 0, "success", 50_000)  # 50 ms
    r.observe(11, -1, "deferred", 10)
    snap = dict(r.snapshot())
    assert snap[("310", "0", "success")][:4] == [32, 16 * 50_500, 16, 0]
    assert snap[("11", "-1", "deferred")][0] == 16


@pytest.mark.parametrize(
    ("answer", "flag", "want"),
    [
        ("sync", 0, (310, 0, "success")),
        ("sync", FLAG_ONEWAY, (310, 0, "oneway")),
        ("none", 0, (310, -1, "deferred")),
        ("error", 0, (310, int(ResponseCode.SYSTEM_BUSY), "success")),
        ("crash", 0, (310, int(ResponseCode.SYSTEM_ERROR), "process_request_failed")),
        ("later", 0, (310, 0, "success")),
    ],
)
def test_server_tells_the_observer(answer: str, flag: int, want: tuple[int, int, str]) -> None:
    seen: list[tuple[int, int, str]] = []
    server = RemotingServer("127.0.0.1", 0)
    server.rpc_observer = lambda code, resp, result, us: seen.append((code, resp, result))
    cmd = RemotingCommand(310, {})
    cmd.flag |= flag

    async def later() -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    def processor(conn: object, c: RemotingCommand) -> object:
        if answer == "sync":
            return c.response(ResponseCode.SUCCESS)
        if answer == "error":
            raise BrokerError.for_code(ResponseCode.SYSTEM_BUSY)("busy")
        if answer == "crash":
            raise RuntimeError("bug")
        if answer == "later":
            return later()
        return None

    server.register(310, processor)  # type: ignore[arg-type]
    try:
        result = server.handle(None, cmd)  # type: ignore[arg-type]
    except (BrokerError, RuntimeError):
        result = None
    if answer == "later":
        asyncio.run(result)  # type: ignore[arg-type]
    assert seen == [want]
