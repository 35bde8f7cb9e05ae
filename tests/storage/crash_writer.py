"""Child process of test_crash.py: appends to a store through
pyrmq.storage.MessageStore from several asyncio tasks until it is killed.

    python -m tests.storage.crash_writer ROOT SYNC_FLUSH|ASYNC_FLUSH SEED TAG

Prints "READY <recovery>" once the store is open, then one line per append
that the store has acknowledged:

    OK <topic> <qid> <queue offset> <phys offset> <size> <sha256 of body> <key>

In SYNC_FLUSH a line is written only after put_message returned PUT_OK (the
record is durable); in ASYNC_FLUSH right after put_message_nowait (the record
is in the page cache, which survives the death of a process). Each line is one
write(2) to the pipe, so a line is either read whole or not at all. Gives up
by itself after MAX_SECONDS so that an orphan cannot run forever."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import sys
import time

import rmqcore
from pyrmq.storage import FlushDiskType, MessageStore, MessageStoreConfig, PutMessageStatus

TOPICS = ("CrashA", "CrashB", "Crash%C")
QUEUES = 3
TASKS = 6
MAX_SECONDS = 30.0
BODY_SIZES = (0, 1, 64, 700, 3000, 12_000)

#: The store's geometry, shared with the parent that reopens it with rmqcore.
CORE = dict(commit_log_file_size=256 * 1024, cq_units_per_file=64, max_message_size=16 * 1024,
            index_hash_slot_num=512, index_num=4096, warm_mapped_files=False)


def config(root: str, mode: str) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root,
        flush_disk_type=FlushDiskType(mode),
        mapped_file_size_commit_log=CORE["commit_log_file_size"],
        mapped_file_size_consume_queue=CORE["cq_units_per_file"] * 20,
        max_message_size=CORE["max_message_size"],
        max_hash_slot_num=CORE["index_hash_slot_num"],
        max_index_num=CORE["index_num"],
        warm_mapped_file_enable=CORE["warm_mapped_files"],
        flush_interval_commit_log_ms=20,
        flush_interval_consume_queue_ms=50,
        flush_consume_queue_thorough_interval_ms=200,
        clean_resource_interval_ms=3_600_000,
        disk_max_used_space_ratio=95,
        disk_space_clean_forcibly_ratio=100,
    )


def emit(line: str) -> None:
    data = (line + "\n").encode()
    assert len(data) < 512  # below PIPE_BUF: one atomic write
    os.write(1, data)


async def writer(store: MessageStore, sync: bool, rng: random.Random, task: int, tag: str,
                 deadline: float) -> None:
    i = 0
    while time.monotonic() < deadline:
        topic, qid = rng.choice(TOPICS), rng.randrange(QUEUES)
        body = rng.randbytes(rng.choice(BODY_SIZES))
        key = f"{tag}-{task}-{i}"
        props = rmqcore.encode_properties({"KEYS": key, "TAGS": f"t{qid}"})
        i += 1
        if sync:
            res = await store.put_message(topic, qid, body, props)
            if res.status is not PutMessageStatus.PUT_OK:
                continue
            r = res.append
        else:
            r = store.put_message_nowait(topic, qid, body, props)
        emit(f"OK {topic} {qid} {r.queue_offset} {r.phys_offset} {r.wrote_bytes} "
             f"{hashlib.sha256(body).hexdigest()} {key}")
        if not sync:
            await asyncio.sleep(rng.random() * 0.002)


async def main(root: str, mode: str, seed: int, tag: str) -> None:
    sync = mode == "SYNC_FLUSH"
    store = MessageStore(config(root, mode))
    await store.start()
    emit("READY " + json.dumps(store.recovery, sort_keys=True))
    deadline = time.monotonic() + MAX_SECONDS
    await asyncio.gather(*(
        writer(store, sync, random.Random(seed * 100 + t), t, tag, deadline)
        for t in range(TASKS)
    ))
    await store.shutdown()
    emit("TIMEOUT")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
