"""Byte-level checks of what rmqcore writes, against tests/formats/reference.py
(a second reader written from csrc/rmq_format.h only)."""

from __future__ import annotations

import contextlib
import os
import string
import struct
import tempfile
import time
import types
import zlib
from collections import defaultdict
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqcore
from tests.formats import reference as ref

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEGMENT = 64 * 1024
SMALL = dict(commit_log_file_size=SEGMENT, cq_units_per_file=5, max_message_size=16 * 1024,
             index_hash_slot_num=64, index_num=256, warm_mapped_files=False)

TOPIC_CHARS = string.ascii_letters + string.digits + "%|_-"
topics = st.text(TOPIC_CHARS, min_size=1, max_size=127)
# Property text: anything but the two separators (and lone surrogates).
ptext = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                max_size=12)
pkey = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)),
               min_size=1, max_size=10)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(st.binary(min_size=8, max_size=8), st.binary(min_size=20, max_size=20))
# Transaction PREPARED/ROLLBACK are left to test_transaction_records_*.
sysflags = st.sampled_from([0, 0x1, 0x2, 0x3, 0x8, 0x10, 0x20, 0x31, 0x40, -(2**31)])


@st.composite
def properties(draw) -> dict[str, str]:
    props: dict[str, str] = {}
    if draw(st.booleans()):
        props["TAGS"] = draw(ptext)
    if draw(st.booleans()):
        props["KEYS"] = " ".join(draw(st.lists(pkey, min_size=1, max_size=3)))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(pkey)
    for k, v in draw(st.dictionaries(pkey, ptext, max_size=3)).items():
        props.setdefault(k, v)
    return props


@st.composite
def messages(draw, max_body: int = 2048, min_size: int = 1, max_size: int = 12) -> list[dict]:
    pool = draw(st.lists(topics, min_size=1, max_size=3, unique=True))
    out = []
    for _ in range(draw(st.integers(min_size, max_size))):
        out.append(dict(
            topic=draw(st.sampled_from(pool)), qid=draw(st.integers(0, 3)),
            body=draw(st.binary(max_size=max_body)), props=draw(properties()), flag=draw(int32),
            sysflag=draw(sysflags), born_timestamp=draw(int64), born_host=draw(hosts),
            reconsume_times=draw(int32), prepared_tx_offset=draw(int64),
        ))
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("formats"))


@contextlib.contextmanager
def new_core(base: str, **kw: object) -> Iterator[rmqcore.MessageStoreCore]:
    with tempfile.TemporaryDirectory(dir=base) as d:
        core = rmqcore.MessageStoreCore(os.path.join(d, "store"), **{**SMALL, **kw})
        try:
            yield core
        finally:
            core.close()


def put(core: rmqcore.MessageStoreCore, m: dict) -> rmqcore.AppendResult:
    return core.put(m["topic"], m["qid"], m["body"], rmqcore.encode_properties(m["props"]),
                    flag=m["flag"], sysflag=m["sysflag"], born_timestamp=m["born_timestamp"],
                    born_host=m["born_host"], reconsume_times=m["reconsume_times"],
                    prepared_tx_offset=m["prepared_tx_offset"])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def expected_sysflag(sysflag: int, born_host: bytes, store_host: bytes) -> int:
    v6 = ref.BORNHOST_V6 * (len(born_host) == 20) | ref.STOREHOST_V6 * (len(store_host) == 20)
    return sysflag & ~(ref.BORNHOST_V6 | ref.STOREHOST_V6) | v6


def as_rmqcore(rec: dict) -> dict:
    """An oracle record under rmqcore.decode_records' key names."""
    return {
        "store_size": rec["total_size"], "magic_code": rec["magic"], "body_crc": rec["body_crc"],
        "queue_id": rec["queue_id"], "flag": rec["flag"], "queue_offset": rec["queue_offset"],
        "commit_log_offset": rec["phys_offset"], "sys_flag": rec["sysflag"],
        "born_timestamp": rec["born_timestamp"], "born_host": rec["born_host"],
        "store_timestamp": rec["store_timestamp"], "store_host": rec["store_host"],
        "reconsume_times": rec["reconsume_times"],
        "prepared_transaction_offset": rec["prepared_tx_offset"], "body": rec["body"],
        "topic": rec["topic"].decode(), "properties": rec["properties"],
    }


def check_record(rec: dict, m: dict, store_host: bytes, *, qoff: int, phys: int, t0: int,
                 t1: int) -> None:
    props = rmqcore.encode_properties(m["props"])
    assert rec["magic"] == ref.MAGIC_V1
    assert rec["total_size"] == ref.record_size(len(m["body"]), len(m["topic"]), len(props),
                                                len(m["born_host"]) == 20, len(store_host) == 20)
    assert rec["body_crc"] == zlib.crc32(m["body"]) & 0x7FFFFFFF
    assert rec["queue_id"] == m["qid"]
    assert rec["flag"] == m["flag"]
    assert rec["queue_offset"] == qoff
    assert rec["phys_offset"] == phys
    assert rec["sysflag"] == expected_sysflag(m["sysflag"], m["born_host"], store_host)
    assert rec["born_timestamp"] == m["born_timestamp"]
    assert rec["born_host"] == m["born_host"]
    assert t0 <= rec["store_timestamp"] <= t1
    assert rec["store_host"] == store_host
    assert rec["reconsume_times"] == m["reconsume_times"]
    assert rec["prepared_tx_offset"] == m["prepared_tx_offset"]
    assert rec["body"] == m["body"]
    assert rec["topic"] == m["topic"].encode()
    assert rec["properties"] == props
    assert ref.decode_properties(rec["properties"]) == m["props"]


# --- constants and hashes ----------------------------------------------------


def test_constants_match_the_spec() -> None:
    assert rmqcore.MESSAGE_MAGIC_CODE == ref.MAGIC_V1 == -626843481
    assert rmqcore.MESSAGE_MAGIC_CODE_V2 == ref.MAGIC_V2 == -626843477
    assert rmqcore.BLANK_MAGIC_CODE == ref.BLANK_MAGIC == -875286124
    assert rmqcore.END_FILE_MIN_BLANK_LENGTH == ref.END_FILE_MIN_BLANK
    assert rmqcore.RECORD_FIXED_IPV4 == ref.FIXED_IPV4
    assert rmqcore.CQ_STORE_UNIT_SIZE == ref.CQ_UNIT
    assert rmqcore.BATCH_ENTRY_FIXED == ref.BATCH_FIXED
    assert rmqcore.MAX_TOPIC_LENGTH == ref.MAX_TOPIC
    assert rmqcore.MAX_PROPERTIES_LENGTH == ref.MAX_PROPS
    assert rmqcore.SYSFLAG_BORNHOST_V6 == ref.BORNHOST_V6
    assert rmqcore.SYSFLAG_STOREHOST_V6 == ref.STOREHOST_V6


def test_java_hash_known_values() -> None:
    # Values of java.lang.String#hashCode.
    known = {"": 0, "a": 97, "hello": 99162322, "Aa": 2112, "BB": 2112,
             "TagA": 2598919, "polygenelubricants": -(2**31), "\U0001f600": 1772899}
    for s, h in known.items():
        assert ref.java_hash(s) == h, s
        assert rmqcore.java_hash(s) == h, s
        assert rmqcore.java_hash(s.encode()) == h, s
    assert rmqcore.tag_code("") == 0 and rmqcore.tag_code(None) == 0


@SETTINGS
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_java_hash_agrees(s: str) -> None:
    assert rmqcore.java_hash(s) == ref.java_hash(s)
    assert rmqcore.java_hash(s.encode()) == ref.java_hash(s.encode())
    assert rmqcore.tag_code(s) == (ref.java_hash(s) if s else 0)


# ASCII runs (hashed eight bytes a step) next to multi-byte characters (one
# at a time), across every alignment.
mixed_text = st.lists(
    st.one_of(st.text(st.characters(max_codepoint=0x7F), max_size=20),
              st.characters(min_codepoint=0x80, blacklist_categories=("Cs",))),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(mixed_text)
def test_java_hash_agrees_on_ascii_runs_beside_other_characters(s: str) -> None:
    assert rmqcore.java_hash(s.encode()) == ref.java_hash(s)


@SETTINGS
@given(st.integers(0, 70_000), st.integers(1, 127), st.integers(0, 32767), st.booleans(),
       st.booleans())
def test_record_size_agrees(body: int, topic: int, props: int, b6: bool, s6: bool) -> None:
    assert rmqcore.record_size(body, topic, props, 20 if b6 else 8, 20 if s6 else 8) == \
        ref.record_size(body, topic, props, b6, s6)


# --- records written by put --------------------------------------------------


@SETTINGS
@given(msgs=messages(max_body=12 * 1024, max_size=16), store_host=hosts)
def test_put_writes_what_the_spec_says(base: str, msgs: list[dict], store_host: bytes) -> None:
    with new_core(base, store_host=store_host) as core:
        next_qoff: dict[tuple[str, int], int] = defaultdict(int)
        pos = 0  # where the oracle expects the next record
        for m in msgs:
            t0 = now_ms()
            r = put(core, m)
            t1 = now_ms()
            props = rmqcore.encode_properties(m["props"])
            size = ref.record_size(len(m["body"]), len(m["topic"]), len(props),
                                   len(m["born_host"]) == 20, len(store_host) == 20)
            seg_end = pos - pos % SEGMENT + SEGMENT
            rolled = pos + size + ref.END_FILE_MIN_BLANK > seg_end
            if rolled:  # the rest of the segment is a blank record
                blank = core.read(pos, seg_end - pos)
                assert struct.unpack_from(">ii", blank) == (seg_end - pos, ref.BLANK_MAGIC)
                assert ref.decode_record(blank) is None
                pos = seg_end
            key = (m["topic"], m["qid"])
            # rolled: the record opened a new segment (the very first one too).
            assert (r.phys_offset, r.wrote_bytes, r.count, bool(r.rolled)) == (
                pos, size, 1, rolled or pos == 0)
            assert r.queue_offset == next_qoff[key]
            assert t0 <= r.store_timestamp <= t1
            raw = core.read(r.phys_offset, r.wrote_bytes)
            rec = ref.decode_record(raw)
            assert rec is not None
            check_record(rec, m, store_host, qoff=next_qoff[key], phys=pos, t0=t0, t1=t1)
            assert rec["store_timestamp"] == r.store_timestamp
            # Byte for byte what the spec's layout gives for these fields.
            assert raw == ref.encode_record(dict(
                queue_id=m["qid"], flag=m["flag"], queue_offset=next_qoff[key], phys_offset=pos,
                sysflag=m["sysflag"], born_timestamp=m["born_timestamp"],
                born_host=m["born_host"], store_timestamp=r.store_timestamp,
                store_host=store_host, reconsume_times=m["reconsume_times"],
                prepared_tx_offset=m["prepared_tx_offset"], body=m["body"],
                topic=m["topic"].encode(), properties=props))
            # The two readers agree on the same bytes.
            assert rmqcore.decode_records(raw) == [as_rmqcore(rec)]
            assert core.look_message_by_offset(pos) == as_rmqcore(rec)
            next_qoff[key] += 1
            pos += size
        assert core.commit_log_max_offset == pos
        for (topic, qid), n in next_qoff.items():
            assert core.max_offset_in_queue(topic, qid) == n


@SETTINGS
@given(msgs=messages(max_body=3000, min_size=2, max_size=20))
def test_decode_records_agrees_on_a_log_range(base: str, msgs: list[dict]) -> None:
    with new_core(base) as core:
        results = [put(core, m) for m in msgs]
        # Decode every segment's written bytes with both readers.
        by_segment: dict[int, list[rmqcore.AppendResult]] = defaultdict(list)
        for r in results:
            by_segment[r.phys_offset - r.phys_offset % SEGMENT].append(r)
        for start, rs in by_segment.items():
            end = rs[-1].next_phys_offset
            data = core.read(start, end - start)
            ours, pos = [], 0
            while pos < len(data):
                rec = ref.decode_record(data, pos)
                assert rec is not None
                ours.append(rec)
                pos += rec["total_size"]
            assert [r["phys_offset"] for r in ours] == [r.phys_offset for r in rs]
            assert rmqcore.decode_records(data) == [as_rmqcore(r) for r in ours]


@st.composite
def oracle_records(draw) -> list[tuple[dict, int]]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        f = dict(
            queue_id=draw(int32), flag=draw(int32), queue_offset=draw(int64),
            phys_offset=draw(int64), sysflag=draw(int32), born_timestamp=draw(int64),
            born_host=draw(hosts), store_timestamp=draw(int64), store_host=draw(hosts),
            reconsume_times=draw(int32), prepared_tx_offset=draw(int64),
            body=draw(st.binary(max_size=300)), topic=draw(topics).encode(),
            properties=rmqcore.encode_properties(draw(properties())),
        )
        out.append((f, draw(st.sampled_from([ref.MAGIC_V1, ref.MAGIC_V2]))))
    return out


@SETTINGS
@given(recs=oracle_records(), tail=st.sampled_from(["none", "blank", "zeros"]))
def test_decode_records_reads_both_magics_and_host_forms(recs: list[tuple[dict, int]],
                                                        tail: str) -> None:
    data = b"".join(ref.encode_record(f, magic) for f, magic in recs)
    if tail == "blank":
        data += struct.pack(">ii", 64, ref.BLANK_MAGIC) + bytes(56)
    elif tail == "zeros":
        data += bytes(100)
    decoded = rmqcore.decode_records(data)
    assert len(decoded) == len(recs)
    pos = 0
    for got, (f, magic) in zip(decoded, recs, strict=True):
        rec = ref.decode_record(data, pos)
        assert rec is not None
        assert got == as_rmqcore(rec)
        assert rec["magic"] == magic
        assert rec["total_size"] == ref.record_size(
            len(f["body"]), len(f["topic"]), len(f["properties"]), len(f["born_host"]) == 20,
            len(f["store_host"]) == 20, magic)
        for k in ("queue_id", "flag", "queue_offset", "phys_offset", "born_timestamp",
                  "born_host", "store_timestamp", "store_host", "reconsume_times",
                  "prepared_tx_offset", "body", "topic", "properties"):
            assert rec[k] == f[k], k
        assert rec["sysflag"] == expected_sysflag(f["sysflag"], f["born_host"], f["store_host"])
        pos += rec["total_size"]


@SETTINGS
@given(recs=oracle_records(), where=st.integers(0, 10**6))
def test_decode_records_rejects_a_corrupt_body(recs: list[tuple[dict, int]], where: int) -> None:
    recs = [(f, m) for f, m in recs if f["body"]]
    if not recs:
        return
    data = bytearray(b"".join(ref.encode_record(f, magic) for f, magic in recs))
    first = ref.decode_record(bytes(data))
    assert first is not None
    body_at = first["total_size"] - len(first["properties"]) - 2 - len(first["topic"]) - (
        2 if first["magic"] == ref.MAGIC_V2 else 1) - len(first["body"])
    data[body_at + where % len(first["body"])] ^= 0x5A
    with pytest.raises(rmqcore.CorruptStoreError):
        rmqcore.decode_records(bytes(data))
    assert len(rmqcore.decode_records(bytes(data), check_crc=False)) == len(recs)


# --- ConsumeQueue files -------------------------------------------------------


@SETTINGS
@given(msgs=messages(max_body=4000, max_size=30), units_per_file=st.sampled_from([1, 2, 5, 7]))
def test_consume_queue_files_on_disk(base: str, msgs: list[dict], units_per_file: int) -> None:
    with tempfile.TemporaryDirectory(dir=base) as d:
        root = os.path.join(d, "store")
        core = rmqcore.MessageStoreCore(root, **{**SMALL, "cq_units_per_file": units_per_file})
        try:
            results = [put(core, m) for m in msgs]
            core.flush_logics()
        finally:
            core.close()
        queues: dict[tuple[str, int], list[tuple[dict, rmqcore.AppendResult]]] = defaultdict(list)
        for m, r in zip(msgs, results, strict=True):
            queues[(m["topic"], m["qid"])].append((m, r))
        for (topic, qid), items in queues.items():
            qdir = os.path.join(root, "consumequeue", topic, str(qid))
            names = sorted(os.listdir(qdir))
            seg_bytes = units_per_file * ref.CQ_UNIT
            assert names == [f"{i * seg_bytes:020d}" for i in range(len(names))]
            assert len(names) == -(-len(items) // units_per_file)
            for name in names:
                assert os.path.getsize(os.path.join(qdir, name)) == seg_bytes
            units = ref.read_queue_units(qdir)
            assert sorted(units) == list(range(len(items)))
            for n, (m, r) in enumerate(items):
                tag = m["props"].get("TAGS")
                assert units[n] == (r.phys_offset, r.wrote_bytes,
                                    ref.java_hash(tag) if tag else 0)
                seg = f"{r.phys_offset // SEGMENT * SEGMENT:020d}"
                with open(os.path.join(root, "commitlog", seg), "rb") as fh:
                    fh.seek(r.phys_offset % SEGMENT)
                    rec = ref.decode_record(fh.read(r.wrote_bytes))
                assert rec is not None
                assert (rec["topic"], rec["queue_id"], rec["queue_offset"]) == (
                    topic.encode(), qid, n)
            # Strictly increasing CommitLog offsets.
            offs = [units[n][0] for n in range(len(items))]
            assert offs == sorted(set(offs))


# --- batches ----------------------------------------------------------------------

batch_entries = st.lists(st.tuples(st.binary(max_size=600), properties(), int32),
                         min_size=1, max_size=8)


@SETTINGS
@given(entries=batch_entries)
def test_encode_batch_is_the_spec_layout(entries: list[tuple[bytes, dict, int]]) -> None:
    data = rmqcore.encode_batch(entries)
    decoded = ref.decode_batch(data)
    assert decoded == [(b, rmqcore.encode_properties(p), f) for b, p, f in entries]
    pos = 0
    for b, p, _ in entries:
        total, magic, crc = struct.unpack_from(">iii", data, pos)
        assert (magic, crc) == (0, 0)
        assert total == ref.BATCH_FIXED + len(b) + len(rmqcore.encode_properties(p))
        pos += total
    assert pos == len(data)


def _spec_properties(items: list[tuple[str, str]]) -> bytes:
    """rmq_format.h section 3, from its text: name, 0x01, value, 0x02, per
    item in order, UTF-8."""
    return b"".join(k.encode() + b"\x01" + v.encode() + b"\x02" for k, v in items)


@SETTINGS
@given(props=properties(), other=st.dictionaries(pkey, st.integers(-5, 5), max_size=3))
def test_encode_properties_is_the_spec_layout(props: dict[str, str], other: dict) -> None:
    """Every kind of mapping encodes as the spec says: a dict of str (the
    one-buffer path), another mapping, and values that are not str (made
    text by str(), the general path)."""
    assert rmqcore.encode_properties(props) == _spec_properties(list(props.items()))
    assert rmqcore.encode_properties(types.MappingProxyType(props)) == _spec_properties(
        list(props.items())
    )
    mixed = {**props, **other}
    assert rmqcore.encode_properties(mixed) == _spec_properties(
        [(k, str(v)) for k, v in mixed.items()]
    )


@SETTINGS
@given(props=properties(), sep=st.sampled_from(["\x01", "\x02"]), in_name=st.booleans())
def test_encode_properties_refuses_a_separator(props: dict[str, str], sep: str,
                                               in_name: bool) -> None:
    """A separator byte in a name or a value is refused, naming the
    property, on both paths."""
    name, value = ("a" + sep + "k", "v") if in_name else ("BadValue", "v" + sep + "w")
    bad = {**props, name: value}
    for mapping in (bad, types.MappingProxyType(bad)):
        with pytest.raises(ValueError, match="contains a reserved separator byte") as e:
            rmqcore.encode_properties(mapping)
        assert repr(name) in str(e.value)


class _Msg:
    """Stands for pyrmq.Message: what encode_message_batch reads of one."""

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(self, topic: str, body: bytes, properties: dict, flag: int) -> None:
        self.topic, self.body, self.properties, self.flag = topic, body, properties, flag


@SETTINGS
@given(entries=st.lists(st.tuples(st.binary(min_size=1, max_size=600), properties(), int32),
                        min_size=1, max_size=8),
       seq=st.integers(0, 2**32 - 1), with_ids=st.booleans())
def test_encode_message_batch_is_encode_batch(entries: list, seq: int, with_ids: bool) -> None:
    """The producer's one-pass encoder writes what encode_batch writes,
    giving messages without a UNIQ_KEY head + 4 hex digits of seq, seq+1..."""
    entries = [(b, {k: v for k, v in p.items() if k not in ("DELAY", "UNIQ_KEY")}, f)
               for b, p, f in entries]
    if with_ids:
        for i, (_, p, _) in enumerate(entries):
            p["UNIQ_KEY"] = f"ID{i}"
    msgs = [_Msg("T", b, dict(p), f) for b, p, f in entries]
    data, ids = rmqcore.encode_message_batch(msgs, "T", "HEAD", seq, 1 << 22, _Msg)
    want = [f"ID{i}" if with_ids else f"HEAD{(seq + i) & 0xFFFF:04X}" for i in range(len(msgs))]
    assert ids.split(",") == want
    assert [m.properties["UNIQ_KEY"] for m in msgs] == want
    assert data == rmqcore.encode_batch([(m.body, m.properties, m.flag) for m in msgs])


def test_encode_message_batch_refusals() -> None:
    def enc(*msgs: _Msg, max_size: int = 1000) -> None:
        rmqcore.encode_message_batch(list(msgs), "T", "H", 0, max_size, _Msg)

    for msgs, words in [
        ((_Msg("T", b"a", {}, 0), _Msg("U", b"b", {}, 0)), "one topic.*message 1"),
        ((_Msg("T", b"a", {}, 0), _Msg("T", b"", {}, 0)), "message 1 .*empty"),
        ((_Msg("T", b"a", {"DELAY": "2"}, 0),), "delayed"),
        ((_Msg("T", b"a", {"k": "x\x01y"}, 0),), "message 0 .*separator"),
        ((_Msg("T", b"a", {"k": "v" * 40000}, 0),), "properties are"),
        ((_Msg("T", b"a" * 1001, {}, 0),), "message 0 .*1001 bytes"),
        ((_Msg("T", b"a" * 600, {}, 0), _Msg("T", b"a" * 600, {}, 0)), "split it"),
        ((), "empty"),
    ]:
        with pytest.raises(ValueError, match=words):
            enc(*msgs, max_size=1000 if words != "properties are" else 1 << 20)
    with pytest.raises(TypeError, match=r"expected a pyrmq\.Message, got bytes"):
        rmqcore.encode_message_batch([b"x"], "T", "H", 0, 1000, _Msg)


@SETTINGS
@given(before=messages(max_body=2000, max_size=4), entries=batch_entries,
       topic=topics, qid=st.integers(0, 3), born_host=hosts, born_ts=int64)
def test_put_batch_round_trip(base: str, before: list[dict], entries: list, topic: str, qid: int,
                              born_host: bytes, born_ts: int) -> None:
    with new_core(base) as core:
        for m in before:
            put(core, m)
        first_qoff = core.max_offset_in_queue(topic, qid)
        start = core.commit_log_max_offset
        t0 = now_ms()
        r = core.put_batch(topic, qid, rmqcore.encode_batch(entries), born_timestamp=born_ts,
                           born_host=born_host)
        t1 = now_ms()
        sizes = [ref.record_size(len(b), len(topic), len(rmqcore.encode_properties(p)),
                                 len(born_host) == 20) for b, p, _ in entries]
        if start + sum(sizes) + ref.END_FILE_MIN_BLANK > start - start % SEGMENT + SEGMENT:
            start = start - start % SEGMENT + SEGMENT  # the whole batch rolls
            assert r.rolled
        assert (r.phys_offset, r.queue_offset, r.count, r.wrote_bytes) == (
            start, first_qoff, len(entries), sum(sizes))
        raw = core.read(r.phys_offset, r.wrote_bytes)
        pos = 0
        for i, (b, p, flag) in enumerate(entries):
            rec = ref.decode_record(raw, pos)
            assert rec is not None
            m = dict(topic=topic, qid=qid, body=b, props=p, flag=flag, sysflag=0,
                     born_timestamp=born_ts, born_host=born_host, reconsume_times=0,
                     prepared_tx_offset=0)
            check_record(rec, m, core.store_host, qoff=first_qoff + i, phys=start + pos,
                         t0=t0, t1=t1)
            assert rec["store_timestamp"] == r.store_timestamp
            pos += rec["total_size"]
        assert rmqcore.decode_records(raw) == [as_rmqcore(rec) for rec in _all(raw)]
        assert core.max_offset_in_queue(topic, qid) == first_qoff + len(entries)
        want = [(start + sum(sizes[:i]), s) for i, s in enumerate(sizes)]
        assert read_queue(core, topic, qid, first_qoff) == want


def read_queue(core: rmqcore.MessageStoreCore, topic: str, qid: int, offset: int = 0) -> list:
    """Every (phys, size) of a queue from offset, through get_message."""
    out: list[tuple[int, int]] = []
    for _ in range(10_000):
        g = core.get_message(topic, qid, offset, 32, 1 << 30)
        if g.status != "FOUND":
            assert g.status == "OFFSET_OVERFLOW_ONE", g
            return out
        out += g.ranges
        offset = g.next_begin_offset
    raise AssertionError("get_message did not reach the end of the queue")


def _all(data: bytes) -> list[dict]:
    out, pos = [], 0
    while pos < len(data):
        rec = ref.decode_record(data, pos)
        assert rec is not None
        out.append(rec)
        pos += rec["total_size"]
    return out


# --- transactions (RocketMQ: PREPARED/ROLLBACK records take no queue offset) ---


@pytest.mark.parametrize("tx", [rmqcore.SYSFLAG_TRANSACTION_PREPARED,
                                rmqcore.SYSFLAG_TRANSACTION_ROLLBACK])
def test_transaction_records_take_no_queue_offset(base: str, tx: int) -> None:
    """RocketMQ's CommitLog gives PREPARED and ROLLBACK records QUEUEOFFSET 0
    and does not advance the queue (they never enter a ConsumeQueue), so
    queue offsets of the consumable records stay dense."""
    with new_core(base) as core:
        a = core.put("T", 0, b"a")
        p = core.put("T", 0, b"half", sysflag=tx)
        b = core.put("T", 0, b"b")
        assert (a.queue_offset, p.queue_offset, b.queue_offset) == (0, 0, 1)
        assert core.max_offset_in_queue("T", 0) == 2
        g = core.get_message("T", 0, 0, 32)
        assert g.ranges == [(a.phys_offset, a.wrote_bytes), (b.phys_offset, b.wrote_bytes)]


@SETTINGS
@given(host=hosts, off=int64)
def test_offset_msg_id_is_hex_of_host_and_offset(host: bytes, off: int) -> None:
    """offsetMsgId: upper-case hex of the store host's bytes and the 8-byte
    big-endian CommitLog offset (RocketMQ's MessageDecoder.createMessageId)."""
    want = (host + off.to_bytes(8, "big", signed=True)).hex().upper()
    assert rmqcore.offset_msg_id(host, off) == want
