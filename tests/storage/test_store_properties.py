"""Property tests of the C store through rmqcore.MessageStoreCore: appends read
back byte-identical, rolling at segment boundaries, ConsumeQueue units, the
IndexFile, and recovery after a crash with a truncated or corrupted CommitLog.

Expected layouts come from tests/formats/reference.py (written from
csrc/rmq_format.h), not from rmqcore."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import random
import signal
import string
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import rmqcore
from tests.formats import reference as ref

ROOT_DIR = Path(__file__).resolve().parents[2]
SEG = 64 * 1024
SMALL = dict(commit_log_file_size=SEG, cq_units_per_file=3, max_message_size=16 * 1024,
             index_hash_slot_num=32, index_num=64, warm_mapped_files=False)
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


# A failing recovery example costs up to a process start; shrinking one can
# take Hypothesis' full five minutes. Shrink only when asked to.
SHRINK = os.environ.get("PYRMQ_HYPOTHESIS_SHRINK") == "1"


def props_settings(n: int, shrink: bool = True) -> settings:
    phases = list(Phase) if shrink or SHRINK else [
        Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    return settings(max_examples=n, deadline=None, suppress_health_check=SLOW_OK, phases=phases)


# --- strategies --------------------------------------------------------------

topics = st.text(string.ascii_letters + string.digits + "%|_-", min_size=1, max_size=127)
ptext = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                max_size=10)
# Index keys: a small alphabet so that keys repeat across records.
index_keys = st.text("abcXYZ019-_\u00e9\u4e2d\U0001f600", min_size=1, max_size=4)


def big_body(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def bodies(large: int) -> st.SearchStrategy[bytes]:
    return st.one_of(st.just(b""), st.binary(max_size=64), st.binary(max_size=3000),
                     st.builds(big_body, st.integers(3000, large), st.integers(0, 2**32)))


@st.composite
def properties(draw) -> dict[str, str]:
    props: dict[str, str] = {}
    if draw(st.booleans()):
        props["TAGS"] = draw(ptext)
    if draw(st.booleans()):
        props["KEYS"] = " ".join(draw(st.lists(index_keys, min_size=1, max_size=3)))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(index_keys)
    for k, v in draw(st.dictionaries(st.sampled_from(["a", "DELAY", "WAIT", "x\u00e9"]), ptext,
                                     max_size=2)).items():
        props.setdefault(k, v)
    return props


@st.composite
def messages(draw, large: int = 15_000, min_size: int = 1, max_size: int = 25) -> list[dict]:
    pool = draw(st.lists(topics, min_size=1, max_size=3, unique=True))
    n = draw(st.integers(min_size, max_size))
    return [dict(topic=draw(st.sampled_from(pool)), qid=draw(st.integers(0, 2)),
                 body=draw(bodies(large)), props=draw(properties())) for _ in range(n)]


# --- the model -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rec:
    topic: str
    qid: int
    props: dict
    raw: bytes  # the record's bytes as written
    phys: int
    size: int
    qoff: int

    @property
    def end(self) -> int:
        return self.phys + self.size

    @property
    def keys(self) -> set[str]:
        ks = {k for k in self.props.get("KEYS", "").split(" ") if k}
        if self.props.get("UNIQ_KEY"):
            ks.add(self.props["UNIQ_KEY"])
        return ks


def seg_end(pos: int, seg: int = SEG) -> int:
    return pos - pos % seg + seg


def place(pos: int, size: int, seg: int = SEG) -> int:
    """Where the spec puts a record of size bytes when the log ends at pos."""
    return seg_end(pos, seg) if pos + size + ref.END_FILE_MIN_BLANK > seg_end(pos, seg) else pos


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("props"))


@contextlib.contextmanager
def store_dir(base: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(dir=base) as d:
        yield os.path.join(d, "store")


@contextlib.contextmanager
def opened(root: str, **cfg: object) -> Iterator[rmqcore.MessageStoreCore]:
    core = rmqcore.MessageStoreCore(root, **cfg)
    try:
        yield core
    finally:
        core.close()


def put_all(core: rmqcore.MessageStoreCore, msgs: Iterable[dict], seg: int = SEG) -> list[Rec]:
    out = []
    for m in msgs:
        pos = core.commit_log_max_offset
        props = rmqcore.encode_properties(m["props"])
        r = core.put(m["topic"], m["qid"], m["body"], props)
        size = ref.record_size(len(m["body"]), len(m["topic"]), len(props))
        assert (r.phys_offset, r.wrote_bytes) == (place(pos, size, seg), size)
        raw = core.read(r.phys_offset, r.wrote_bytes)
        out.append(Rec(m["topic"], m["qid"], m["props"], raw, r.phys_offset, size,
                       r.queue_offset))
    return out


def read_queue(core: rmqcore.MessageStoreCore, topic: str, qid: int) -> list[tuple[int, int]]:
    """Every (phys, size) of a queue, through get_message's defaults."""
    out: list[tuple[int, int]] = []
    offset = 0
    for _ in range(100_000):
        g = core.get_message(topic, qid, offset)
        if g.status != "FOUND":
            want = "OFFSET_OVERFLOW_ONE" if offset else "NO_MESSAGE_IN_QUEUE"
            assert g.status == want, (topic, qid, offset, g)
            return out
        assert g.ranges, g
        out += g.ranges
        assert g.next_begin_offset > offset
        offset = g.next_begin_offset
    raise AssertionError("get_message did not reach the end of the queue")


def check_store(core: rmqcore.MessageStoreCore, recs: list[Rec],
                queues: Iterable[tuple[str, int]] = (), lost: Iterable[Rec] = ()) -> None:
    """The store holds exactly recs: byte-identical records, dense queues whose
    units (through get_message and as raw files) point at them, and an index
    that finds each key of recs and none of the lost records'."""
    root = core.root
    by_q: dict[tuple[str, int], list[Rec]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: r.phys):
        by_q[(r.topic, r.qid)].append(r)
    for r in recs:
        assert core.read(r.phys, r.size) == r.raw, f"record at {r.phys} differs"
    for q in set(queues) | set(by_q):
        items = by_q.get(q, [])
        assert [r.qoff for r in items] == list(range(len(items))), q
        assert core.min_offset_in_queue(*q) == 0
        assert core.max_offset_in_queue(*q) == len(items), q
        got = read_queue(core, *q)
        assert got == [(r.phys, r.size) for r in items], q
        if got:
            pull = core.read_ranges(got)
            assert pull == b"".join(r.raw for r in items), q
            decoded = rmqcore.decode_records(pull)
            assert [d["commit_log_offset"] for d in decoded] == [r.phys for r in items]
            for d, r in zip(decoded, items, strict=True):
                o = ref.decode_record(r.raw)
                assert o is not None
                assert (d["body"], d["properties"], d["queue_offset"]) == (
                    o["body"], o["properties"], r.qoff)
        status = core.get_message(*q, len(items) + 1).status
        assert status == ("OFFSET_OVERFLOW_BADLY" if items else "NO_MESSAGE_IN_QUEUE")
        qdir = os.path.join(root, "consumequeue", q[0], str(q[1]))
        units = ref.read_queue_units(qdir) if os.path.isdir(qdir) else {}
        want = {}
        for n, r in enumerate(items):
            tag = r.props.get("TAGS")
            want[n] = (r.phys, r.size, ref.java_hash(tag) if tag else 0)
        assert units == want, q
    expected: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in recs:
        for k in r.keys:
            expected[(r.topic, k)].add(r.phys)
    asked = set(expected) | {(r.topic, k) for r in lost for k in r.keys}
    for topic, key in asked:
        want_offs = sorted(expected.get((topic, key), ()), reverse=True)
        got_offs = core.query_message_offsets(topic, key, max_num=len(want_offs) + 8)
        assert got_offs == want_offs, (topic, key)


# --- (a) append and read back, (c) units, (d) index --------------------------------


@props_settings(50)
@given(msgs=messages(large=100_000, max_size=30),
       cq_units=st.sampled_from([1, 3, 300]), index_num=st.sampled_from([4, 64, 4096]))
def test_appends_read_back_identical(base: str, msgs: list[dict], cq_units: int,
                                     index_num: int) -> None:
    cfg = {**SMALL, "commit_log_file_size": 256 * 1024, "max_message_size": 128 * 1024,
           "cq_units_per_file": cq_units, "index_num": index_num}
    with store_dir(base) as root:
        with opened(root, **cfg) as core:
            recs = put_all(core, msgs, seg=256 * 1024)
            check_store(core, recs)
        with opened(root, **cfg) as core:  # and after a clean reopen
            assert not core.recovery["abnormal"]
            check_store(core, recs)


@props_settings(2)
@given(sizes=st.lists(st.sampled_from([4 << 20, (4 << 20) - 1, 0, 1000]), min_size=3,
                      max_size=5), seed=st.integers(0, 2**32))
def test_four_mib_bodies(base: str, sizes: list[int], seed: int) -> None:
    seg = 9 << 20
    cfg = {**SMALL, "commit_log_file_size": seg, "max_message_size": 4 << 20}
    sizes = [4 << 20, *sizes]
    msgs = [dict(topic="Big", qid=i % 2, body=big_body(n, seed + i),
                 props={"KEYS": f"k{i}", "TAGS": "T"}) for i, n in enumerate(sizes)]
    with store_dir(base) as root:
        with opened(root, **cfg) as core:
            recs = put_all(core, msgs, seg=seg)
            with pytest.raises(rmqcore.IllegalMessageError):
                core.put("Big", 0, bytes((4 << 20) + 1))
            assert core.commit_log_max_offset == recs[-1].end  # nothing written
            check_store(core, recs)
        with opened(root, **cfg) as core:
            check_store(core, recs)


# --- (b) rolling at every segment boundary ------------------------------------------

# How far past the segment end the next record would end: -8 fills the segment
# exactly (leaving the minimum blank), -7 and later roll.
deltas = st.sampled_from([-9, -8, -7, -1, 0, 1, None])


@props_settings(50)
@given(plan=st.lists(st.tuples(deltas, st.integers(0, 2), st.integers(0, 500), properties()),
                     min_size=1, max_size=40),
       topic=topics, reopen_abnormal=st.booleans())
def test_rolling_at_every_segment_boundary(base: str, plan: list, topic: str,
                                           reopen_abnormal: bool) -> None:
    cfg = {**SMALL, "cq_units_per_file": 7, "max_message_size": SEG}
    with store_dir(base) as root:
        with opened(root, **cfg) as core:
            recs: list[Rec] = []
            blanks = []
            for delta, qid, small, props in plan:
                pos = core.commit_log_max_offset
                overhead = ref.record_size(0, len(topic), len(rmqcore.encode_properties(props)))
                n = seg_end(pos) - pos + delta - overhead if delta is not None else -1
                if n + overhead + ref.END_FILE_MIN_BLANK > SEG:  # could never fit
                    n = -1
                body = bytes([qid]) * (n if n >= 0 else small)
                [rec] = put_all(core, [dict(topic=topic, qid=qid, body=body, props=props)])
                if delta is not None and n >= 0:
                    assert (rec.phys == pos) == (delta <= -ref.END_FILE_MIN_BLANK)
                if rec.phys != pos:
                    blanks.append((pos, rec.phys - pos))
                recs.append(rec)
            for pos, left in blanks:  # blank records fill every segment's tail
                assert core.read(pos, left)[:8] == left.to_bytes(4, "big") + \
                    ref.BLANK_MAGIC.to_bytes(4, "big", signed=True)
            check_store(core, recs)
        if reopen_abnormal:
            Path(root, "abort").touch()
        with opened(root, **cfg) as core:
            assert core.recovery["abnormal"] == reopen_abnormal
            assert core.commit_log_max_offset == recs[-1].end
            check_store(core, recs)
            more = put_all(core, [dict(topic=topic, qid=0, body=b"after", props={})])
            assert more[0].qoff == sum(r.qid == 0 for r in recs)
            check_store(core, recs + more)


# --- (e) recovery -------------------------------------------------------------------

CHILD = r"""
import os, pickle, signal, sys
import rmqcore
root, path = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    cfg, msgs, flush_at = pickle.load(f)
core = rmqcore.MessageStoreCore(root, **cfg)
out, confirm = [], 0
for i, m in enumerate(msgs + [None]):
    if i == flush_at:
        confirm = core.flush_commit_log()
        core.flush_logics()
    if m is None:
        break
    r = core.put(m["topic"], m["qid"], m["body"], rmqcore.encode_properties(m["props"]))
    out.append((r.phys_offset, r.wrote_bytes, r.queue_offset,
                core.read(r.phys_offset, r.wrote_bytes)))
with open(path + ".out", "wb") as f:
    pickle.dump((out, confirm), f)
os.kill(os.getpid(), signal.SIGKILL)
"""


def write_and_crash(root: str, msgs: list[dict], flush_at: int, mode: str) -> tuple[list[Rec], int]:
    """Write msgs (flushing CommitLog, ConsumeQueues and checkpoint before
    message flush_at), then stop: 'sigkill' kills the writing process, 'abort'
    closes and puts the abort marker back (an unclean shutdown after a full
    flush), 'clean' closes. Returns the records and the checkpointed offset."""
    if mode == "sigkill":
        path = root + ".in"
        with open(path, "wb") as f:
            pickle.dump((SMALL, msgs, flush_at), f)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])}
        p = subprocess.run([sys.executable, "-c", CHILD, root, path], env=env, timeout=60,
                           capture_output=True)
        assert p.returncode == -signal.SIGKILL, p.stderr.decode()
        with open(path + ".out", "rb") as f:
            out, confirm = pickle.load(f)
        recs = [Rec(m["topic"], m["qid"], m["props"], raw, phys, size, qoff)
                for m, (phys, size, qoff, raw) in zip(msgs, out, strict=True)]
        assert Path(root, "abort").exists()
        return recs, confirm
    core = rmqcore.MessageStoreCore(root, **SMALL)
    try:
        recs = put_all(core, msgs[:flush_at])
        core.flush_commit_log()
        core.flush_logics()
        recs += put_all(core, msgs[flush_at:])
    finally:
        core.close()
    if mode == "abort":
        Path(root, "abort").touch()
    return recs, core_end(recs)


def core_end(recs: list[Rec]) -> int:
    return recs[-1].end if recs else 0


def truncate_log(root: str, x: int) -> None:
    """Cut the CommitLog at byte x: the segment holding x keeps x - start
    bytes, later segments go."""
    cl = os.path.join(root, "commitlog")
    for name in os.listdir(cl):
        start = int(name)
        if start > x:
            os.unlink(os.path.join(cl, name))
        elif start <= x < start + SEG:
            os.truncate(os.path.join(cl, name), x - start)


def poke(root: str, offset: int, xor: int) -> None:
    path = os.path.join(root, "commitlog", f"{offset - offset % SEG:020d}")
    with open(path, "r+b") as f:
        f.seek(offset % SEG)
        b = f.read(1)[0]
        f.seek(offset % SEG)
        f.write(bytes([b ^ xor]))


def detectable_bytes(rec: Rec) -> list[int]:
    """Offsets (within the record) of bytes whose corruption the format can
    detect: TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, BODYLENGTH, the
    body (CRC) and PROPERTIESLENGTH. Flags, times, hosts and offsets other
    than PHYSICALOFFSET have no check in RocketMQ's format."""
    o = ref.decode_record(rec.raw)
    assert o is not None
    props_len_at = rec.size - len(o["properties"]) - 2
    body_at = props_len_at - len(o["topic"]) - 1 - len(o["body"])
    return [*range(0, 12), *range(28, 36), *range(body_at - 4, body_at + len(o["body"])),
            props_len_at, props_len_at + 1]


def reopen_and_check(root: str, recs: list[Rec], intact: int, end: int, abnormal: bool,
                     new_msgs: list[dict]) -> None:
    """Reopen after damage: exactly recs[:intact] survive; appends go on."""
    kept, lost = recs[:intact], recs[intact:]
    queues = {(r.topic, r.qid) for r in recs}
    with opened(root, **SMALL) as core:
        assert core.recovery["abnormal"] == abnormal
        assert core.commit_log_max_offset == end, core.recovery
        check_store(core, kept, queues, lost)
        more = put_all(core, new_msgs)
        for r in more:
            assert r.qoff == sum((k.topic, k.qid) == (r.topic, r.qid) for k in kept + more
                                 if k.phys < r.phys)
        check_store(core, kept + more, queues, lost)
    with opened(root, **SMALL) as core:
        assert not core.recovery["abnormal"]
        check_store(core, kept + more, queues, lost)


def expected_end(recs: list[Rec], intact: int, blank_survives: bool) -> int:
    """Where the recovered CommitLog ends: after the last intact record, or at
    the next segment when the blank record that followed it is still whole
    (a cut inside it, even after its 8-byte header, ends the log at the
    record before it, as RocketMQ's recovery ends in a last file's blank)."""
    e = core_end(recs[:intact])
    if intact < len(recs) and recs[intact].phys != e and blank_survives:
        return seg_end(e)
    return e


crash_modes = st.sampled_from(["abort", "sigkill"])


@props_settings(60, shrink=False)
@given(msgs=messages(min_size=1, max_size=30), data=st.data(), mode=crash_modes,
       new=messages(max_size=4))
def test_recovery_after_truncation(base: str, msgs: list[dict], data: st.DataObject, mode: str,
                                   new: list[dict]) -> None:
    """Crash, cut the CommitLog at any byte X: exactly the records ending at
    or before X survive, intact and in their queues; appends continue."""
    flush_at = data.draw(st.integers(0, len(msgs)), label="flush_at")
    with store_dir(base) as root:
        recs, _ = write_and_crash(root, msgs, flush_at, mode)
        end = core_end(recs)
        near = [p + d for r in recs for p in (r.phys, r.end) for d in (-1, 0, 1, 8)]
        x = data.draw(st.one_of(st.integers(0, end), st.sampled_from(near)), label="X")
        x = min(max(x, 0), end)
        truncate_log(root, x)
        intact = sum(r.end <= x for r in recs)
        e = core_end(recs[:intact])
        reopen_and_check(root, recs, intact, expected_end(recs, intact, x >= seg_end(e)), True, new)


@props_settings(60, shrink=False)
@given(msgs=messages(min_size=1, max_size=30), data=st.data(), mode=crash_modes,
       new=messages(max_size=4))
def test_recovery_after_corruption(base: str, msgs: list[dict], data: st.DataObject, mode: str,
                                   new: list[dict]) -> None:
    """Crash, then flip one byte of a record written after the checkpoint (or
    of the last record), or garbage after the end of the log: the records
    before the damaged one survive, nothing after it does."""
    flush_at = data.draw(st.integers(0, len(msgs)), label="flush_at")
    with store_dir(base) as root:
        recs, confirm = write_and_crash(root, msgs, flush_at, mode)
        victims = [i for i, r in enumerate(recs) if r.phys >= confirm] or [len(recs) - 1]
        end = core_end(recs)
        if data.draw(st.booleans(), label="garbage after the end"):
            room = seg_end(end) - end
            junk = data.draw(st.binary(min_size=1, max_size=min(room, 64)), label="junk")
            for i, b in enumerate(junk):
                poke(root, end + i, b)
            reopen_and_check(root, recs, len(recs), end, True, new)
            return
        i = data.draw(st.sampled_from(victims), label="victim")
        at = data.draw(st.sampled_from(detectable_bytes(recs[i])), label="byte")
        xor = data.draw(st.integers(1, 255), label="xor")
        if at == 7 and xor == 0x0C:  # would turn MAGIC_CODE into MAGIC_CODE_V2
            xor = 0x0D
        poke(root, recs[i].phys + at, xor)
        reopen_and_check(root, recs, i, expected_end(recs, i, True), True, new)


@props_settings(25, shrink=False)
@given(msgs=messages(min_size=1, max_size=20), data=st.data(), new=messages(max_size=3))
def test_recovery_clean_reopen_after_truncation(base: str, msgs: list[dict],
                                               data: st.DataObject, new: list[dict]) -> None:
    """A clean shutdown, then the CommitLog loses its tail (cut at X): a
    clean reopen must not serve records past X either."""
    with store_dir(base) as root:
        recs, _ = write_and_crash(root, msgs, len(msgs), "clean")
        end = core_end(recs)
        x = data.draw(st.integers(0, end), label="X")
        truncate_log(root, x)
        intact = sum(r.end <= x for r in recs)
        e = core_end(recs[:intact])
        want_end = expected_end(recs, intact, x >= seg_end(e))
        reopen_and_check(root, recs, intact, want_end, False, new)


# --- minimal reproductions of the recovery bugs found above ------------------------


def test_truncation_below_old_consume_queue_segments_minimal(base: str) -> None:
    """ConsumeQueue recovery must drop units pointing past the recovered
    CommitLog end in every segment, not only in the last three."""
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=0, body=b"x" * 10, props={}) for _ in range(20)]
        recs, _ = write_and_crash(root, msgs, 0, "abort")  # 7 CQ segments of 3 units
        truncate_log(root, recs[2].end)
        reopen_and_check(root, recs, 3, recs[2].end, True,
                         [dict(topic="T", qid=0, body=b"new", props={})])


def test_clean_reopen_after_truncation_minimal(base: str) -> None:
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=0, body=b"x" * 10, props={}) for _ in range(5)]
        recs, _ = write_and_crash(root, msgs, 5, "clean")
        truncate_log(root, recs[2].end)
        reopen_and_check(root, recs, 3, recs[2].end, False, [])


def test_clean_reopen_with_the_cut_inside_the_end_blank_minimal(base: str) -> None:
    """Four records fill most of the first segment, the fifth goes to the
    next behind an end-of-file blank record; the CommitLog is then cut 100
    bytes into that blank, its header whole. The log ends after the fourth
    record, and appends go on from there (found by the ASan stage's draw of
    test_recovery_clean_reopen_after_truncation; the oracle had expected the
    next segment)."""
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=i % 2, body=big_body(15_000, i), props={"KEYS": f"k{i}"})
                for i in range(5)]
        recs, _ = write_and_crash(root, msgs, 5, "clean")
        e = recs[3].end
        assert recs[4].phys == seg_end(e) > e + 100  # a blank between them
        truncate_log(root, e + 100)
        reopen_and_check(root, recs, 4, e, False,
                         [dict(topic="T", qid=0, body=b"new", props={"KEYS": "n"})])


def test_truncation_inside_the_last_records_properties_minimal(base: str) -> None:
    """A cut that only removes the tail of a record's properties: the
    shortened segment comes back zero-filled to its full size and, since only
    the body is CRC-protected, the record must still not survive (its TAGS,
    KEYS or UNIQ_KEY would be silently changed)."""
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=0, body=b"a", props={"KEYS": "k1"}),
                dict(topic="T", qid=0, body=b"b", props={"KEYS": "k2", "TAGS": "TagB"})]
        recs, _ = write_and_crash(root, msgs, 2, "abort")
        truncate_log(root, recs[1].end - 3)
        reopen_and_check(root, recs, 1, recs[0].end, True, [])


# --- damage the format cannot detect ---------------------------------------------


def check_dense(core: rmqcore.MessageStoreCore, queues: Iterable[tuple[str, int]]) -> None:
    """Each queue's units 0..max-1 point at records of that queue with that
    QUEUEOFFSET."""
    for topic, qid in queues:
        got = read_queue(core, topic, qid)
        assert core.max_offset_in_queue(topic, qid) == len(got), (topic, qid)
        for n, (phys, size) in enumerate(got):
            rec = ref.decode_record(core.read(phys, size))
            assert rec is not None
            assert (rec["topic"], rec["queue_id"], rec["queue_offset"]) == (
                topic.encode(), qid, n), (topic, qid, n, phys)


def check_after_tail_corruption(root: str, recs: list[Rec], new: list[dict]) -> None:
    """The last record was damaged where no check covers it (it may or may
    not survive), and it had not been dispatched to a durable ConsumeQueue:
    the store still opens, earlier records are intact, every queue is dense
    and consistent with the records it points at, and appends go on."""
    *before, victim = recs
    queues = {(r.topic, r.qid) for r in recs}
    with opened(root, **SMALL) as core:
        end = core.commit_log_max_offset
        assert end in (expected_end(recs, len(before), True), victim.end), core.recovery
        for r in before:
            assert core.read(r.phys, r.size) == r.raw
        if end == victim.end:  # kept: in the queue its bytes now name
            rec = ref.decode_record(core.read(victim.phys, victim.size))
            assert rec is not None
            queues.add((rec["topic"].decode(), rec["queue_id"]))
        check_dense(core, queues)
        for m in new:
            want = core.max_offset_in_queue(m["topic"], m["qid"])
            [r] = put_all(core, [m])
            assert r.qoff == want
            queues.add((r.topic, r.qid))
        end = core.commit_log_max_offset
    with opened(root, **SMALL) as core:
        assert core.commit_log_max_offset == end
        for r in before:
            assert core.read(r.phys, r.size) == r.raw
        check_dense(core, queues)


@props_settings(40, shrink=False)
@given(msgs=messages(min_size=1, max_size=20), data=st.data(), new=messages(max_size=3))
def test_recovery_after_corrupting_any_byte_of_the_unflushed_last_record(
        base: str, msgs: list[dict], data: st.DataObject, new: list[dict]) -> None:
    flush_at = data.draw(st.integers(0, len(msgs) - 1), label="flush_at")
    with store_dir(base) as root:
        recs, confirm = write_and_crash(root, msgs, flush_at, "sigkill")
        victim = recs[-1]
        assert victim.phys >= confirm
        at = data.draw(st.integers(0, victim.size - 1), label="byte")
        poke(root, victim.phys + at, data.draw(st.integers(1, 255), label="xor"))
        check_after_tail_corruption(root, recs, new)


def test_topic_flip_in_the_unflushed_tail_minimal(base: str) -> None:
    """A byte of the last record's TOPIC flipped after a crash (the body CRC
    does not cover it): its ConsumeQueue unit, still in the page cache after
    the kill, names a record that now says another topic. Recovery must drop
    that unit; the record, kept, belongs to the topic its bytes name (found
    by the property test above: "UVH5h00" became "UWH5h00")."""
    with store_dir(base) as root:
        msgs = [dict(topic="TV", qid=2, body=b"first", props={}),
                dict(topic="TV", qid=1, body=b"second", props={"KEYS": "k"})]
        recs, _ = write_and_crash(root, msgs, 0, "sigkill")
        victim = recs[-1]
        at = victim.raw.index(b"TV")
        poke(root, victim.phys + at + 1, ord("V") ^ ord("W"))  # "TV" -> "TW"
        check_after_tail_corruption(root, recs, [dict(topic="TV", qid=1, body=b"n", props={})])


def test_queue_offset_flip_in_the_unflushed_tail_minimal(base: str) -> None:
    """QUEUEOFFSET of the last record + 4096: recovery re-dispatches it and
    fills the gap with ConsumeQueue segments, one file (and fd) each (1365
    here; with + 65536 the open fails with EMFILE)."""
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=0, body=b"x" * 10, props={}) for _ in range(3)]
        recs, _ = write_and_crash(root, msgs, 0, "sigkill")
        poke(root, recs[2].phys + 20 + 6, 0x10)
        check_after_tail_corruption(root, recs, [])
        assert len(os.listdir(os.path.join(root, "consumequeue", "T", "0"))) <= 2


def test_queue_id_flip_in_the_unflushed_tail_minimal(base: str) -> None:
    """QUEUEID of the last record becomes 16777216 (>= max_queue_nums):
    recovery dispatches it into a new queue directory, and the next open
    refuses the store as 'not a pyrmq store directory'."""
    with store_dir(base) as root:
        msgs = [dict(topic="T", qid=0, body=b"x" * 10, props={}) for _ in range(3)]
        recs, _ = write_and_crash(root, msgs, 0, "sigkill")
        poke(root, recs[2].phys + 12, 0x01)
        with opened(root, **SMALL):
            pass
        with opened(root, **SMALL):
            pass
        check_after_tail_corruption(root, recs, [])
