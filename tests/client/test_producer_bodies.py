"""What a Producer does to a body before it leaves: zlib compression (the
threshold, the level, what the broker stores) and unique ids (UNIQ_KEY),
against real servers (tests.client._producer_env)."""

from __future__ import annotations

import asyncio
import os
import zlib

import pytest

import rmqcore
from pyrmq.common.message import (
    SYSFLAG_COMPRESSED,
    Message,
    MessageQueue,
    new_unique_id,
)
from pyrmq.producer import Producer
from pyrmq.remoting import RequestCode
from tests.client._producer_env import (
    HEX32,
    create_topic,
    env,
    pull_all,
    stored_at,
)

# -- compression ------------------------------------------------------------------------------


def test_large_body_compressed_on_the_wire(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "ZipT", 1)
            mq = MessageQueue("ZipT", "broker-a", 0)
            pattern = b"0123456789abcdef" * 1024
            bodies = [pattern[:4095], pattern[:4096], pattern * 8]
            results = [await p.send(Message("ZipT", b), mq=mq) for b in bodies]
            stored = await pull_all(e.api, a, mq)
            assert [m.body for m in stored] == bodies  # inflated on arrival
            small, edge, big = stored
            assert not small.sys_flag & SYSFLAG_COMPRESSED
            assert small.store_size > 4095
            for m in (edge, big):
                assert m.sys_flag & SYSFLAG_COMPRESSED
                assert m.store_size < 1024  # what the CommitLog holds is the deflated body
            # the raw record read by rmqcore: sysFlag bit 0 and a zlib body
            view = await e.api.broker_request(
                a, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(stored_at(results[2])[1])}
            )
            (rec,) = rmqcore.decode_records(view.body, True)
            assert rec["sys_flag"] & rmqcore.SYSFLAG_COMPRESSED
            assert len(rec["body"]) < len(bodies[2])
            assert zlib.decompress(rec["body"]) == bodies[2]

    arun(main())


def test_compression_threshold_is_configurable(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, producer_kw={"compress_msg_body_over_howmuch": 100}) as e:
            p, a = e.producer, e.cluster.broker_addr
            r = await p.send(Message("ZipT2", b"a" * 100))
            m = await e.api.view_message(a, stored_at(r)[1])
            assert m.sys_flag & SYSFLAG_COMPRESSED and m.body == b"a" * 100

    arun(main())


def test_compression_level_is_configurable(arun, tmp_path):
    """compress_level is zlib's: 0 stores the body deflate-framed but not
    smaller, the default shrinks it; outside 0..9 the producer refuses."""

    async def main() -> None:
        body = b"0123456789abcdef" * 1024
        for level, shrinks in ((0, False), (5, True)):
            kw = {"compress_level": level}
            async with env(tmp_path / str(level), producer_kw=kw) as e:
                r = await e.producer.send(Message("ZipT3", body))
                m = await e.api.view_message(e.cluster.broker_addr, stored_at(r)[1])
                assert m.sys_flag & SYSFLAG_COMPRESSED and m.body == body
                assert (m.store_size < len(body)) is shrinks

    arun(main())
    with pytest.raises(ValueError, match=r"compress_level must be 0\.\.9"):
        Producer("PG", "127.0.0.1:9876", compress_level=10)


def test_a_body_deflated_off_the_loop_is_sent_as_it_is(arun, tmp_path):
    """send_deflated_async (the trace dispatcher's, its bodies compressed on
    a rmqcore.DeflateWorker's thread): the body goes as given, flagged
    COMPRESSED, whatever its size, and readers get it inflated."""

    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            w = rmqcore.DeflateWorker(1)
            body = b"deflated elsewhere " * 20  # under the 4 KB threshold
            assert w.submit(body)
            deadline = asyncio.get_running_loop().time() + 30
            done: list = []
            while not done and asyncio.get_running_loop().time() < deadline:
                done = w.done()
                await asyncio.sleep(0.001)
            ((stream, _, _),) = done
            got: list = []
            r = await p.send_deflated_async(
                Message("ZipT4", stream), lambda res, exc: got.append((res, exc))
            )
            assert got == [(r, None)]
            m = await e.api.view_message(a, stored_at(r)[1])
            assert m.sys_flag & SYSFLAG_COMPRESSED and m.body == body
            assert m.store_size < len(body)
            w.close()

    arun(main())


# -- unique ids -------------------------------------------------------------------------------


def test_unique_keys_over_10000_messages(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            ids: list[str] = []
            for b in range(100):
                msgs = [Message("UniqT", f"{b}.{i}".encode()) for i in range(100)]
                r = await e.producer.send_batch(msgs)
                assert r.ok
                ids.extend(r.msg_id.split(","))
            assert len(ids) == 10_000
            assert len(set(ids)) == 10_000
            assert all(HEX32.match(i) for i in ids)

    arun(main(), timeout=60)


def test_unique_ids_differ_across_fork():
    before = new_unique_id()  # the parent's generator is set up before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            data = "\n".join(new_unique_id() for _ in range(1000)).encode()
            os.write(w, data)
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        for _ in range(10_000):
            chunk = f.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    child = b"".join(chunks).decode().split("\n")
    parent = [new_unique_id() for _ in range(1000)]
    assert len(child) == 1000 and all(HEX32.match(i) for i in child)
    # prefix: IPv4 (8 hex) + pid (4) + random (8); the child's is new
    assert {i[:20] for i in child} == {child[0][:20]}
    assert child[0][:20] != before[:20] == parent[0][:20]
    assert child[0][8:12] == f"{pid & 0xFFFF:04X}"
    assert not set(child) & set(parent) and before not in child
