"""Scenario 2 of the fault suite: torn and damaged files.

A broker's store is damaged while the broker is stopped, and the broker is
started on it: truncation and flipped bytes in the CommitLog, a
ConsumeQueue, an IndexFile, the checkpoint, and the JSON state files it
persists (consumerOffset.json, topics.json). Every case starts from a copy
of one baseline store whose contents were read back before the damage.

What the product promises, and the test asserts per case:

* the broker starts, and logs what recovery repaired ("recovery repaired:"
  lines from the store, an error naming the damaged state file and its
  .bak);
* it never serves a corrupted record: every record a pull returns has a
  matching body CRC and is, byte for byte in its body, the record the
  baseline had at that queue and offset;
* it serves the intact data: every message whose bytes the damage did not
  touch is served (CommitLog damage loses only the records it hit or cut
  off; damage to the derived files (ConsumeQueue, IndexFile, checkpoint)
  loses nothing, they are rebuilt from the CommitLog);
* a state file that no longer parses is replaced by its previous save, so
  committed offsets go back at most one save (redelivery, never a skip).

Where the promise stops: recovery checks the
CommitLog from the segment that holds the checkpoint (all of it here, one
segment; in a big store the older segments are not read at startup, and a
pull checks a record's header against its ConsumeQueue unit but not its
body CRC, which pyrmq's client checks); a flipped byte in a field the format
does not check (times, hosts, properties; an index slot; a JSON value that
still parses) goes undetected and is counted as such. Store-level
regressions for each repair come first, then the broker scenario."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

import rmqcore
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.common.errors import BrokerError
from pyrmq.common.message import Message, MessageQueue
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.storage import MessageStore
from pyrmq.storage.check import check_store
from pyrmq.testing.cluster import ProcessCluster
from tests.chaos._crash_helpers import Admin, read_served
from tests.chaos.conftest import scale
from tests.conftest import small_config
from tests.formats import reference as ref

# -- store-level regressions -------------------------------------------------------------

TOPICS = ("TA", "TB")
QUEUES = 4


@dataclass(frozen=True)
class Put:
    topic: str
    qid: int
    qoff: int
    body: bytes
    phys: int
    size: int

    @property
    def end(self) -> int:
        return self.phys + self.size


async def fill(store: MessageStore, n: int, body_len: tuple[int, int] = (10, 200)) -> list[Put]:
    """n messages over TOPICS x QUEUES, bodies m<i>-xxx, KEYS m<i>."""
    rnd = random.Random(n)
    out = []
    for i in range(n):
        mid = f"m{i:06d}"
        topic, qid = TOPICS[i % 2], (i // 2) % QUEUES
        body = f"{mid}-".encode() + b"x" * rnd.randrange(*body_len)
        props = rmqcore.encode_properties({"UNIQ_KEY": f"U{i:031d}", "KEYS": mid, "TAGS": "t"})
        r = (await store.put_message(topic, qid, body, props)).append
        out.append(Put(topic, qid, r.queue_offset, body, r.phys_offset, r.wrote_bytes))
    return out


def served(store: MessageStore) -> dict[tuple[str, int, int], bytes]:
    """(topic, queue, offset) -> body of every record the store serves (each
    CRC-checked by the decoder)."""
    out = {}
    for topic in TOPICS:
        for qid in range(QUEUES):
            off = 0
            for _ in range(100_000):
                got = store.get_message(topic, qid, off, 32)
                if got.ranges:
                    for rec in rmqcore.decode_records(store.read(got.ranges)):
                        out[(topic, qid, rec["queue_offset"])] = rec["body"]
                if got.next_begin_offset <= off:
                    break
                off = got.next_begin_offset
    return out


def expected(
    puts: list[Put], lost: set[int] | frozenset[int] = frozenset()
) -> dict[tuple[str, int, int], bytes]:
    """What served() should return when the puts numbered in `lost` are gone."""
    return {(p.topic, p.qid, p.qoff): p.body for i, p in enumerate(puts) if i not in lost}


def flip(path: str | os.PathLike[str], pos: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))


def segment(root: str, start: int = 0) -> str:
    return os.path.join(root, "commitlog", f"{start:020d}")


def test_flipped_bytes_in_durable_records_lose_only_those_records(tmp_path, arun):
    """A flipped body byte (CRC), TOTALSIZE byte (structure) and
    PHYSICALOFFSET byte in three records in the middle of a cleanly closed
    log: recovery overwrote only them (before: the log ended at the first,
    losing every record after it), never serves them, and keeps their queue
    offsets unused; a second start finds nothing more to repair."""
    root = str(tmp_path / "store")
    victims = {300: 95, 900: 2, 1200: 30}  # record -> byte within it (body, size, position)

    async def main() -> None:
        async with MessageStore(small_config(root)) as store:
            puts = await fill(store, 1500)
        assert puts[-1].end < 1 << 20  # one segment: all of it scanned at start
        for i, at in victims.items():
            flip(segment(root), puts[i].phys + at)
        async with MessageStore(small_config(root)) as store:
            rec = store.recovery
            assert (rec["damaged_ranges"], rec["bytes_damaged"]) == (
                3,
                sum(puts[i].size for i in victims),
            ), rec
            assert rec["commit_log_end"] == puts[-1].end
            assert served(store) == expected(puts, set(victims))
            for i in victims:  # the damaged offsets are not given out again
                p = puts[i]
                r = store.put_message_nowait(p.topic, p.qid, b"new", b"")
                assert r.queue_offset == store.max_offset_in_queue(p.topic, p.qid) - 1
                assert r.queue_offset > p.qoff
        raw = pathlib.Path(segment(root)).read_bytes()
        for i in victims:  # each is now the filler of rmq_format.h, read by the oracle
            filler = ref.decode_record(raw, puts[i].phys)
            assert filler is not None and filler["total_size"] == puts[i].size
            assert filler["sysflag"] & 0xC == 0xC  # a rolled-back transaction: in no queue
            assert "%DAMAGED%".startswith(filler["topic"].decode())
            assert filler["body"] == bytes(len(filler["body"]))
            assert filler["body_crc"] == ref.body_crc(filler["body"])
            assert filler["phys_offset"] == puts[i].phys
        assert pathlib.Path(root, "commitlog").exists() and check_store(root).ok
        async with MessageStore(small_config(root)) as store:
            assert store.recovery["damaged_ranges"] == 0
            assert store.recovery["consume_queues_repaired"] == 0
            got = served(store)
            assert {k: v for k, v in got.items() if v != b"new"} == expected(puts, set(victims))

    arun(main(), timeout=60)


@pytest.mark.parametrize("where", ["half", "3 bytes into a record"])
def test_a_segment_cut_short_in_the_middle_keeps_the_segments_after_it(tmp_path, arun, where):
    """The middle one of three CommitLog segments loses its second half:
    what was cut is gone, everything before and after it is served (before:
    the log ended at the cut, dropping the last segment too). A cut a few
    bytes into a record leaves less than a record header before it: the
    filler still covers the rest of the segment."""
    root = str(tmp_path / "store")
    seg = 1 << 20

    async def main() -> None:
        async with MessageStore(small_config(root)) as store:
            puts = await fill(store, 2600, body_len=(900, 1100))
        assert puts[-1].phys >= 2 * seg
        cut = seg + seg // 2
        if where != "half":
            cut = next(p.phys for p in puts if p.phys >= cut) + 3
        os.truncate(segment(root, seg), cut - seg)
        lost = {i for i, p in enumerate(puts) if seg <= p.phys < 2 * seg and p.end > cut}
        async with MessageStore(small_config(root)) as store:
            rec = store.recovery
            assert rec["commit_log_short_files"] == 1 and rec["damaged_ranges"] == 1, rec
            assert rec["commit_log_end"] == puts[-1].end
            assert served(store) == expected(puts, lost)

    arun(main(), timeout=60)


def test_consume_queues_cut_or_flipped_are_rebuilt_from_the_commit_log(tmp_path, arun):
    """One ConsumeQueue file cut short, another with a flipped byte in a
    unit's offset: both rebuilt, every message served (before: the units
    after the damage were lost)."""
    root = str(tmp_path / "store")

    async def main() -> None:
        async with MessageStore(small_config(root)) as store:
            puts = await fill(store, 1500)
        cq = pathlib.Path(root, "consumequeue")
        os.truncate(cq / "TA" / "1" / f"{0:020d}", 37 * 20 + 7)
        flip(cq / "TB" / "2" / f"{0:020d}", 10 * 20 + 6)
        async with MessageStore(small_config(root)) as store:
            assert store.recovery["consume_queues_repaired"] == 2, store.recovery
            assert served(store) == expected(puts)

    arun(main(), timeout=60)


def test_records_of_a_queue_with_no_units_left_are_never_overwritten(tmp_path, arun):
    """A ConsumeQueue directory gone while another queue's damage makes
    recovery dispatch again from the middle of the log: the orphaned
    queue's records there do not fit (no queue to compare them with) but
    are intact, and must not be taken for damage (the repair overwrites)."""
    root = str(tmp_path / "store")

    async def main() -> None:
        async with MessageStore(small_config(root)) as store:
            puts = await fill(store, 1500)
        before = pathlib.Path(segment(root)).read_bytes()
        cq = pathlib.Path(root, "consumequeue")
        shutil.rmtree(cq / "TA" / "1")
        os.truncate(cq / "TB" / "2" / f"{0:020d}", 50 * 20)  # rebuilt from its unit 50 on
        async with MessageStore(small_config(root)) as store:
            assert store.recovery["damaged_ranges"] == 0, store.recovery
            got = served(store)
        assert pathlib.Path(segment(root)).read_bytes()[: puts[-1].end] == before[: puts[-1].end]
        # every other queue whole; the orphan from where dispatch started again
        orphan = [p for p in puts if (p.topic, p.qid) == ("TA", 1)]
        rest = {k: v for k, v in expected(puts).items() if k[:2] != ("TA", 1)}
        assert {k: v for k, v in got.items() if k[:2] != ("TA", 1)} == rest
        kept = {k: v for k, v in got.items() if k[:2] == ("TA", 1)}
        assert kept and kept == {(p.topic, p.qid, p.qoff): p.body for p in orphan[-len(kept) :]}

    arun(main(), timeout=60)


def test_a_damaged_index_file_is_dropped_and_built_again(tmp_path, arun):
    """An IndexFile cut short used to stop the store from opening; now it
    and the newer ones are deleted and every key is indexed again."""
    root = str(tmp_path / "store")
    cfg = small_config(root, max_index_num=512)

    async def main() -> None:
        async with MessageStore(cfg) as store:
            puts = await fill(store, 1500)
        files = sorted(pathlib.Path(root, "index").iterdir())
        assert len(files) >= 4
        os.truncate(files[1], 1000)
        async with MessageStore(cfg) as store:
            assert store.recovery["index_files_dropped"] == len(files) - 1, store.recovery
            for i in range(0, 1500, 97):
                p = puts[i]
                found = await store.query_message(p.topic, f"m{i:06d}")
                assert [m["body"] for m in found] == [p.body]

    arun(main(), timeout=60)


@pytest.mark.parametrize("damage", ["cut short", "a queue id that is not a number"])
def test_a_damaged_state_file_loads_its_previous_save(tmp_path, caplog, damage):
    """consumerOffset.json damaged: moved aside, the .bak (the save before)
    loaded, and an error logged naming both (before: the broker refused to
    start, on a file that did not parse and on one that parsed but named a
    queue "q")."""
    path = str(tmp_path / "config" / "consumerOffset.json")
    offsets = ConsumerOffsetManager(path)
    for off in (10, 20):
        offsets.commit_offset("g", "T", 0, off)
        offsets.persist_now()
    assert json.loads(pathlib.Path(path + ".bak").read_text())["offsetTable"]["T@g"]["0"] == 10
    if damage == "cut short":
        os.truncate(path, 17)
    else:
        text = pathlib.Path(path).read_text()
        pathlib.Path(path).write_text(text.replace('"0"', '"q"'))
    with caplog.at_level(logging.ERROR, logger="pyrmq.config"):
        assert ConsumerOffsetManager(path).query_offset("g", "T", 0) == 10
    assert "loaded the previous save" in caplog.text
    assert [p.name for p in (tmp_path / "config").iterdir() if ".damaged-" in p.name]


# -- the scenario: a broker process over damaged copies of one store ---------------------

BROKER = "broker-a"
TOPIC = "DamageT"
GROUP = "cg-damage"
#: the cases, by file and kind of damage
KINDS = (
    "commitlog-truncate",
    "commitlog-flip",
    "consumequeue-truncate",
    "consumequeue-flip",
    "index-truncate",
    "index-flip",
    "checkpoint-truncate",
    "checkpoint-flip",
    "offsets-truncate",
    "offsets-flip",
    "topics-truncate",
    "topics-flip",
)
#: kinds whose damage the format always detects (a repair must be logged)
ALWAYS_DETECTED = {
    "commitlog-truncate",
    "consumequeue-truncate",
    "index-truncate",
    "checkpoint-truncate",
    "checkpoint-flip",
    "offsets-truncate",
    "topics-truncate",
}


@dataclass
class Baseline:
    """The undamaged store and what it held."""

    store: pathlib.Path
    # body -> (queue id, queue offset, CommitLog offset, size)
    messages: dict[bytes, tuple[int, int, int, int]]
    by_position: dict[tuple[int, int], bytes]
    end: int  # CommitLog end
    offsets: list[dict[int, int]]  # committed offsets of GROUP: the older save, the newer


@dataclass
class Damage:
    """What one case did to the store."""

    what: str
    touched: set[bytes] = field(default_factory=set)  # messages whose bytes it hit or cut off
    undetectable: bool = False  # the format cannot tell (a JSON file that still parses)


async def _build_baseline(c: ProcessCluster, n: int) -> Baseline:
    addr = c.broker_addr(BROKER)
    mqs = [MessageQueue(TOPIC, BROKER, q) for q in range(QUEUES)]
    offsets = []
    async with Admin(c.namesrv_addr) as admin:
        await admin.create_topic(addr, TOPIC, QUEUES)
        async with Producer("pg-damage", c.namesrv_addr) as p:
            for i in range(n):
                mid = f"d{i:06d}"
                body = f"{mid}-".encode() + b"y" * (i % 150)
                r = await p.send(Message(TOPIC, body, keys=mid, tags="t"))
                assert r.send_status is SendStatus.SEND_OK
        # two saves of consumerOffset.json with different offsets: the
        # .bak holds the older one
        for frac in (3, 2):
            for mq in mqs:
                off = n // QUEUES // frac
                await admin.api.update_consumer_offset(addr, GROUP, mq, off)
            offsets.append({mq.queue_id: n // QUEUES // frac for mq in mqs})
            c.stop_broker(BROKER)
            await c.start_broker_async(BROKER)
            addr = c.broker_addr(BROKER)
        messages, by_position = {}, {}
        for mq in mqs:
            got = await read_served(admin, addr, mq)
            assert not got.malformed and all(r["crc_ok"] for r in got.records)
            for r in got.records:
                messages[r["body"]] = (mq.queue_id, r["queue_offset"],
                                       r["commit_log_offset"], r["store_size"])  # fmt: skip
                by_position[(mq.queue_id, r["queue_offset"])] = r["body"]
    assert len(messages) == n
    assert c.stop_broker(BROKER) == 0
    keep = c.root / "baseline"
    shutil.copytree(c.store_dir(BROKER), keep)
    end = max(m[2] + m[3] for m in messages.values())
    return Baseline(keep, messages, by_position, end, offsets)


@pytest.fixture(scope="module")
def damaged_cluster(
    tmp_path_factory: pytest.TempPathFactory, long_mode: bool
) -> Iterator[tuple[ProcessCluster, Baseline]]:
    c = ProcessCluster(
        tmp_path_factory.mktemp("damaged") / "cluster",
        [BROKER],
        broker_conf={
            # several IndexFiles, so a damaged one has newer ones after it
            "maxIndexNum": 1024,
            "maxHashSlotNum": 256,
        },
    )
    c.start()
    try:
        base = asyncio.run(_build_baseline(c, scale(long_mode, 1000, 5000)))
        yield c, base
    finally:
        statuses = c.shutdown()
        print(c.log_tails(40))
    assert all(rc in (0, None) for rc in statuses.values()), statuses


def _touched_by(base: Baseline, lo: int, hi: int) -> set[bytes]:
    """Messages with a byte in [lo, hi) of the CommitLog."""
    return {b for b, (_, _, phys, size) in base.messages.items() if phys < hi and lo < phys + size}


def _damage(kind: str, store: pathlib.Path, base: Baseline, rnd: random.Random) -> Damage:
    part, how = kind.split("-")
    if part == "commitlog":
        path = store / "commitlog" / f"{0:020d}"
        if how == "truncate":
            cut = rnd.randrange(0, base.end)
            os.truncate(path, cut)
            return Damage(f"CommitLog cut at {cut}", _touched_by(base, cut, base.end))
        spots = [rnd.randrange(0, base.end) for _ in range(rnd.randint(1, 5))]
        for pos in spots:
            flip(path, pos, 1 << rnd.randrange(8))
        touched = set().union(*(_touched_by(base, pos, pos + 1) for pos in spots))
        return Damage(f"CommitLog bytes flipped at {spots}", touched)
    if part == "consumequeue":
        qid = rnd.randrange(QUEUES)
        path = store / "consumequeue" / TOPIC / str(qid) / f"{0:020d}"
        units = sum(1 for q, *_ in base.messages.values() if q == qid)
        if how == "truncate":
            cut = rnd.randrange(0, units * 20)
            os.truncate(path, cut)
            return Damage(f"ConsumeQueue {qid} cut at {cut}")
        spots = [rnd.randrange(0, units * 20) for _ in range(rnd.randint(1, 5))]
        for pos in spots:
            flip(path, pos, 1 << rnd.randrange(8))
        return Damage(f"ConsumeQueue {qid} bytes flipped at {spots}")
    if part == "index":
        files = sorted((store / "index").iterdir())
        path = rnd.choice(files)
        size = path.stat().st_size
        if how == "truncate":
            cut = rnd.randrange(0, size)
            os.truncate(path, cut)
            return Damage(f"IndexFile {files.index(path)}/{len(files)} cut at {cut}")
        spots = [rnd.randrange(0, size) for _ in range(rnd.randint(1, 20))]
        for pos in spots:
            flip(path, pos, 1 << rnd.randrange(8))
        return Damage(f"IndexFile {files.index(path)}/{len(files)} bytes flipped at {spots}")
    if part == "checkpoint":
        path = store / "checkpoint"
        if how == "truncate":
            cut = rnd.randrange(0, 56)  # the checkpoint's payload and CRC
            os.truncate(path, cut)
            return Damage(f"checkpoint cut at {cut}")
        pos = rnd.randrange(0, 56)
        flip(path, pos, 1 << rnd.randrange(8))
        return Damage(f"checkpoint byte flipped at {pos}")
    name = {"offsets": "consumerOffset.json", "topics": "topics.json"}[part]
    path = store / "config" / name
    size = path.stat().st_size
    if how == "truncate":
        cut = rnd.randrange(0, size)
        os.truncate(path, cut)
        return Damage(f"{name} cut at {cut}")
    pos = rnd.randrange(0, size)
    flip(path, pos, 1 << rnd.randrange(8))
    try:
        json.loads(path.read_bytes())
        undetectable = True
    except ValueError:
        undetectable = False
    return Damage(f"{name} byte flipped at {pos}", undetectable=undetectable)


@dataclass
class Outcome:
    repairs: list[str]
    served: dict[bytes, tuple[int, int]]
    corrupt: list[str]
    offsets: dict[int, int | None]
    query_hits: int = 0
    query_wrong: list[str] = field(default_factory=list)


async def _observe(
    c: ProcessCluster, base: Baseline, queries: list[bytes], routed: bool
) -> Outcome:
    addr = c.broker_addr(BROKER)
    log = c.brokers[BROKER].log_path.read_text(errors="replace").rsplit("=== start #", 1)[1]
    repairs = [
        line for line in log.splitlines() if "recovery repaired:" in line or "pyrmq.config" in line
    ]
    served: dict[bytes, tuple[int, int]] = {}
    corrupt: list[str] = []
    offsets: dict[int, int | None] = {}
    async with Admin(c.namesrv_addr) as admin:
        if routed:
            await admin.wait_route(TOPIC, 30.0)
        for q in range(QUEUES):
            mq = MessageQueue(TOPIC, BROKER, q)
            try:
                got = await read_served(admin, addr, mq)
            except BrokerError:  # topics.json changed past recognition
                assert not routed
                continue
            if got.malformed:
                corrupt.append(f"queue {q}: {got.malformed} pull bodies that do not decode")
            for r in got.records:
                pos = (q, r["queue_offset"])
                if not r["crc_ok"] or base.by_position.get(pos) != r["body"]:
                    corrupt.append(f"queue {q} offset {r['queue_offset']}: {r['body'][:12]!r}")
                else:
                    served[r["body"]] = pos
            try:
                offsets[q] = await admin.api.query_consumer_offset(addr, GROUP, mq)
            except BrokerError:
                assert not routed
                offsets[q] = None
        out = Outcome(repairs, served, corrupt, offsets)
        for body in queries:
            key = body.split(b"-")[0].decode()
            found = await admin.api.query_message(addr, TOPIC, key, 32, 0, 2**62)
            if any(m.body != body or key not in (m.keys or "") for m in found):
                out.query_wrong.append(key)
            out.query_hits += any(m.body == body for m in found)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_broker_starts_on_damaged_files_and_serves_only_intact_messages(
    damaged_cluster, long_mode, report, kind
):
    c, base = damaged_cluster
    rounds = scale(long_mode, 1, 5)
    seed = int(os.environ.get("PYRMQ_CHAOS_SEED") or random.randrange(2**32))
    rnd = random.Random(f"{seed}:{kind}")
    figures: Counter[str] = Counter()
    bodies = sorted(base.messages)
    for r in range(rounds):
        store = c.store_dir(BROKER)
        shutil.rmtree(store)
        shutil.copytree(base.store, store)
        damage = _damage(kind, store, base, rnd)
        note = f"round {r} (seed {seed}): {damage.what}"
        c.start_broker(BROKER)  # raises, with the log, if the broker does not start
        queries = rnd.sample(bodies, 20) if kind.startswith("index") else []
        # a state file that still parses may name the topic no more (a
        # flipped letter in its name): then it need not be routed
        out = asyncio.run(_observe(c, base, queries, routed=not damage.undetectable))
        assert c.stop_broker(BROKER) == 0, c.brokers[BROKER].log_tail(40)

        lost_intact = sorted(set(base.messages) - damage.touched - set(out.served))
        figures["rounds"] += 1
        figures["messages"] += len(base.messages)
        figures["served"] += len(out.served)
        figures["hit_by_damage"] += len(damage.touched)
        figures["detected"] += bool(out.repairs)
        figures["corrupt_served"] += len(out.corrupt)
        figures["lost_intact"] += len(lost_intact)
        # hit in a field no check covers (times, hosts, properties): served
        figures["hit_but_served"] += len(damage.touched & set(out.served))
        # a JSON file that still parses, with values the broker cannot tell
        # from real ones (RocketMQ's layout has no checksum)
        undetected = damage.undetectable and not out.repairs
        figures["undetectable"] += undetected
        figures["query_hits"] += out.query_hits
        figures["queries"] += len(queries)
        if undetected:
            # its new values are taken as they are: only the start and the
            # absence of corrupted records are promised
            assert not out.corrupt, (note, out.corrupt[:5])
            continue
        assert not out.corrupt, (note, out.corrupt[:5])
        assert not lost_intact, (note, len(lost_intact), lost_intact[:5], out.repairs)
        assert not out.query_wrong, (note, out.query_wrong)
        if kind in ALWAYS_DETECTED:
            assert out.repairs, (note, "no repair was logged")
        if damage.touched - set(out.served):
            assert out.repairs, (note, "messages went missing without a repair in the log")
        if kind == "index-truncate":
            assert out.query_hits == len(queries), (note, out.query_hits)
        if kind.startswith("offsets"):
            older, newer = base.offsets
            for q, off in out.offsets.items():
                assert off in (older[q], newer[q]), (note, q, off, base.offsets)
        else:
            assert out.offsets == base.offsets[-1], (note, out.offsets)
    report(kind=kind, seed=seed, **figures)
