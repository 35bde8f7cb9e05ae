"""duplicateDetection: a send whose UNIQ_KEY the broker stored in the topic
within the window is answered with the first send's result and not stored
again; real broker on 127.0.0.1, C++-client-shaped SEND_MESSAGE frames."""

from __future__ import annotations

import asyncio

import pytest

import rmqcore
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.dedup import DuplicateDetector
from pyrmq.common.errors import ClientError
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.storage import MessageStore
from pyrmq.testing import LocalCluster
from tests.conftest import small_config

from .helpers import cluster, max_offset, props, send

KEY = "7F0000010000" + "0" * 19 + "1"
OTHER = "7F0000010000" + "0" * 19 + "2"


def fields_of(r):
    return {k: r.ext_fields[k] for k in ("msgId", "queueId", "queueOffset")}


def test_a_resent_message_is_answered_not_stored(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, duplicate_detection=True) as (c, cl):
            first = await send(cl, c.broker_addr, "DupT", b"m", 1, props(UNIQ_KEY=KEY))
            # the retry of a client that lost the answer goes to another queue
            again = await send(cl, c.broker_addr, "DupT", b"m", 2, props(UNIQ_KEY=KEY))
            assert first.code == again.code == R.SUCCESS
            assert fields_of(again) == fields_of(first)
            other = await send(cl, c.broker_addr, "DupT", b"m", 1, props(UNIQ_KEY=OTHER))
            assert other.code == R.SUCCESS and other.ext_fields["queueOffset"] == "1"
            # another topic is another message; no UNIQ_KEY: never a duplicate
            t2 = await send(cl, c.broker_addr, "DupT2", b"m", 0, props(UNIQ_KEY=KEY))
            assert t2.code == R.SUCCESS and t2.ext_fields["msgId"] != first.ext_fields["msgId"]
            for _ in range(2):
                assert (await send(cl, c.broker_addr, "DupT", b"n", 3, props(KEYS=KEY))).code == 0
            assert [await max_offset(cl, c.broker_addr, "DupT", q) for q in range(4)] == [
                0,
                2,
                0,
                2,
            ]
            assert c.broker.dedup.duplicates == 1  # type: ignore[union-attr]

    arun(main())


def test_a_delayed_message_resent_names_its_queue(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, duplicate_detection=True) as (c, cl):
            p = props(UNIQ_KEY=KEY, DELAY="3")
            first = await send(cl, c.broker_addr, "DupT", b"later", 2, p)
            again = await send(cl, c.broker_addr, "DupT", b"later", 0, p)
            assert fields_of(again) == fields_of(first) and again.ext_fields["queueId"] == "2"
            assert await max_offset(cl, c.broker_addr, "SCHEDULE_TOPIC_XXXX", 2) == 1

    arun(main())


def test_without_the_switch_a_resent_message_is_stored_again(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            for q in (1, 2):
                r = await send(cl, c.broker_addr, "DupT", b"m", q, props(UNIQ_KEY=KEY))
                assert r.code == R.SUCCESS
            assert await max_offset(cl, c.broker_addr, "DupT", 2) == 1

    arun(main())


def test_the_window_ends(arun, tmp_path):
    async def main() -> None:
        async with cluster(
            tmp_path, duplicate_detection=True, duplicate_detection_window_seconds=1
        ) as (c, cl):
            first = await send(cl, c.broker_addr, "DupT", b"m", 0, props(UNIQ_KEY=KEY))
            await asyncio.sleep(1.3)
            late = await send(cl, c.broker_addr, "DupT", b"m", 0, props(UNIQ_KEY=KEY))
            assert late.ext_fields["queueOffset"] == "1" != first.ext_fields["queueOffset"]

    arun(main())


def test_the_window_survives_a_restart(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, duplicate_detection=True) as (c, cl):
            first = await send(cl, c.broker_addr, "DupT", b"m", 1, props(UNIQ_KEY=KEY))
            await c.stop_broker()
            await c.start_broker()
            again = await send(cl, c.broker_addr, "DupT", b"m", 3, props(UNIQ_KEY=KEY))
            assert fields_of(again) == fields_of(first)
            assert await max_offset(cl, c.broker_addr, "DupT", 3) == 0

    arun(main())


def test_bad_settings_are_refused_clearly(arun, tmp_path):
    with pytest.raises(ClientError, match="duplicateDetectionWindowSeconds=0"):
        BrokerConfig(duplicate_detection_window_seconds=0)

    async def main() -> None:
        c = LocalCluster(str(tmp_path / "s"), duplicate_detection=True, message_index_enable=False)
        with pytest.raises(ClientError, match="messageIndexEnable=true"):
            await c.start()
        await c.shutdown()

    arun(main())


def test_the_detector_covers_what_the_index_has_not_reached(arun, tmp_path):
    """A send stored a moment ago (the index thread has not indexed it) is
    found in the detector's memory; once indexed, it is forgotten there and
    found in the IndexFiles."""

    async def main() -> None:
        async with MessageStore(small_config(str(tmp_path / "store"))) as store:
            d = DuplicateDetector(store, 60)
            await d.start()
            p = props(UNIQ_KEY=KEY)
            assert d.stored("DupT", p) is None
            r = store.put_message_nowait("DupT", 0, b"m", p)
            d.remember("DupT", p, r)
            if store.index_dispatched <= r.phys_offset:
                assert store.find_key("DupT", KEY, 0) == []  # not indexed yet
            m = d.stored("DupT", p)
            assert m is not None and m["commit_log_offset"] == r.phys_offset
            await store.catch_up_index()
            assert store.index_dispatched >= r.phys_offset + r.wrote_bytes
            m = d.stored("DupT", p)
            assert m is not None and m["commit_log_offset"] == r.phys_offset
            assert not d._recent, "an indexed send is still held in memory"
            assert d.stored("DupT", props(UNIQ_KEY=OTHER)) is None
            assert d.stored("OtherT", p) is None

    arun(main())


def test_keys_mode_for_clients_that_change_uniq_key_on_retry(arun, tmp_path):
    """duplicateDetectionKey=KEYS: RocketMQ's C++ client makes a new UNIQ_KEY
    for every attempt; the message's KEYS (all of them) identify it, its
    UNIQ_KEY when it has none."""

    async def main() -> None:
        async with cluster(tmp_path, duplicate_detection=True, duplicate_detection_key="KEYS") as (
            c,
            cl,
        ):
            first = await send(cl, c.broker_addr, "DupT", b"m", 1, props(KEYS="o-1", UNIQ_KEY=KEY))
            retry = await send(
                cl, c.broker_addr, "DupT", b"m", 2, props(KEYS="o-1", UNIQ_KEY=OTHER)
            )
            assert fields_of(retry) == fields_of(first)
            for p in (props(KEYS="o-1 o-2", UNIQ_KEY=OTHER), props(KEYS="o-2", UNIQ_KEY=KEY)):
                r = await send(cl, c.broker_addr, "DupT", b"m", 3, p)
                assert r.code == R.SUCCESS and r.ext_fields["queueId"] == "3", p
            # no KEYS: the UNIQ_KEY decides
            a = await send(cl, c.broker_addr, "DupT", b"m", 0, props(UNIQ_KEY="A" * 32))
            b = await send(cl, c.broker_addr, "DupT", b"m", 0, props(UNIQ_KEY="A" * 32))
            assert fields_of(a) == fields_of(b)
            assert [await max_offset(cl, c.broker_addr, "DupT", q) for q in range(4)] == [
                1,
                1,
                0,
                2,
            ]
        with pytest.raises(ClientError, match="duplicateDetectionKey='ID'"):
            BrokerConfig(duplicate_detection_key="ID")

    arun(main())


def _batch(keys: list[str]) -> bytes:
    return rmqcore.encode_batch([(b"b-" + k.encode(), {"UNIQ_KEY": k}, 0) for k in keys])


def test_a_resent_batch_is_answered_not_stored(arun, tmp_path):
    """A batch is stored whole, so its retry (the same bytes) is answered
    with the stored batch's ids, queue and offset; a batch that shares only
    its first key with a stored one is not a retry and is stored."""
    keys = [f"{KEY[:-2]}{i:02X}" for i in range(5)]

    async def main() -> None:
        async with cluster(tmp_path, duplicate_detection=True) as (c, cl):
            body = _batch(keys)
            first = await send(cl, c.broker_addr, "DupB", body, 1, "", code=RC.SEND_BATCH_MESSAGE,
                               batch=True)  # fmt: skip
            assert first.code == R.SUCCESS, first
            assert len(first.ext_fields["msgId"].split(",")) == 5
            again = await send(cl, c.broker_addr, "DupB", body, 2, "", code=RC.SEND_BATCH_MESSAGE,
                               batch=True)  # fmt: skip
            assert again.code == R.SUCCESS and fields_of(again) == fields_of(first)
            assert [await max_offset(cl, c.broker_addr, "DupB", q) for q in (1, 2)] == [5, 0]
            # the same first key, other messages after it: stored
            other = _batch([keys[0], OTHER])
            r = await send(cl, c.broker_addr, "DupB", other, 1, "", code=RC.SEND_BATCH_MESSAGE,
                           batch=True)  # fmt: skip
            assert r.code == R.SUCCESS and r.ext_fields["queueOffset"] == "5"
            assert c.broker.dedup.duplicates == 1  # type: ignore[union-attr]

    arun(main())
