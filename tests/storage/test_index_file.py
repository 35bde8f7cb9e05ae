"""IndexFile / IndexService (csrc/index_file.c, csrc/index_service.c), driven
through cffi."""

from __future__ import annotations

import importlib
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cffi")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
_cffi_core = importlib.import_module("_cffi_core")

ffi, lib = _cffi_core.load()

HEADER = 40
T0 = 1_700_000_000_000  # a store timestamp (ms)
WIDE = (0, 2**62)


# --- reference model -------------------------------------------------------


def java_hash(s: str) -> int:
    """Java String.hashCode: 31*h + c over UTF-16 code units, as int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def key_hash(topic: str, key: str) -> int:
    """RocketMQ's IndexService key hash: abs(hashCode), 0 if still negative."""
    h = abs(java_hash(f"{topic}#{key}"))
    return 0 if h >= 1 << 31 else h


# topic "T" with this key hashes to Integer.MIN_VALUE, whose abs() stays
# negative (found by solving 31*c1 + c2 for the last two code units).
MIN_VALUE_KEY = "k788300\ufa24\x0c"


# --- thin wrappers -----------------------------------------------------------


def check(rc: int) -> int:
    if rc < 0:
        raise OSError(rc, ffi.string(lib.rmq_strerror(rc)).decode())
    return rc


def b(s: str | bytes) -> bytes:
    return s.encode() if isinstance(s, str) else s


class IndexFile:
    def __init__(self, path, slots, num, create=True):
        out = ffi.new("rmq_index_file_t **")
        check(lib.rmq_index_file_open(str(path).encode(), slots, num, int(create), out))
        self.f = out[0]

    def put(self, topic, key, offset, ts):
        t, k = b(topic), b(key)
        return lib.rmq_index_file_put_key(self.f, t, len(t), k, len(k), offset, ts)

    def select(self, topic, key, begin=WIDE[0], end=WIDE[1], max_n=1000):
        t, k = b(topic), b(key)
        out = ffi.new("int64_t[]", max(max_n, 1))
        n = ffi.new("int *")
        check(
            lib.rmq_index_file_select(
                self.f, t, len(t), k, len(k), begin, end, out, max_n, n
            )
        )
        return [out[i] for i in range(n[0])]

    def header(self):
        return (
            lib.rmq_index_file_begin_timestamp(self.f),
            lib.rmq_index_file_end_timestamp(self.f),
            lib.rmq_index_file_begin_phy_offset(self.f),
            lib.rmq_index_file_end_phy_offset(self.f),
            lib.rmq_index_file_index_count(self.f),
        )

    def close(self, unlink=False):
        check(lib.rmq_index_file_flush(self.f))
        lib.rmq_index_file_close(self.f, int(unlink))


class Service:
    def __init__(self, d, slots=97, num=50):
        out = ffi.new("rmq_index_service_t **")
        check(lib.rmq_index_service_open(str(d).encode(), slots, num, out))
        self.s = out[0]

    def put(self, topic, key, offset, ts):
        t, k = b(topic), b(key)
        check(lib.rmq_index_service_put(self.s, t, len(t), k, len(k), offset, ts))

    def query(self, topic, key, begin=WIDE[0], end=WIDE[1], max_n=10_000):
        t, k = b(topic), b(key)
        out = ffi.new("int64_t[]", max(max_n, 1))
        n = ffi.new("int *")
        check(
            lib.rmq_index_service_query(
                self.s, t, len(t), k, len(k), begin, end, out, max_n, n
            )
        )
        return [out[i] for i in range(n[0])]

    def end_phy_offset(self):
        return lib.rmq_index_service_end_phy_offset(self.s)

    def delete_before(self, offset):
        return check(lib.rmq_index_service_delete_before(self.s, offset))

    def truncate(self, offset):
        return check(lib.rmq_index_service_truncate(self.s, offset))

    def close(self):
        check(lib.rmq_index_service_flush(self.s, ffi.NULL))
        lib.rmq_index_service_close(self.s)


def index_names(d):
    return sorted(
        p.name for p in Path(d).iterdir() if p.name.isdigit() and len(p.name) == 17
    )


def parse(path, slots):
    """Header, slots and entries of an IndexFile, straight from its bytes."""
    data = Path(path).read_bytes()
    header = struct.unpack(">qqqqii", data[:HEADER])
    slot_vals = struct.unpack(f">{slots}i", data[HEADER : HEADER + 4 * slots])
    base = HEADER + 4 * slots
    entries = [
        struct.unpack(">iqii", data[base + 20 * n : base + 20 * n + 20])
        for n in range((len(data) - base) // 20)
    ]
    return header, slot_vals, entries


@pytest.fixture(autouse=True)
def no_leaks():
    before = lib.rmq_mapped_file_live_count()
    yield
    assert lib.rmq_mapped_file_live_count() == before


# --- Java hashCode ----------------------------------------------------------------

HASH_VECTORS = [
    "",
    "a",
    "hello",
    "TopicTest#KEY1",
    "polygenelubricants",  # Integer.MIN_VALUE in Java
    "héllo",
    "日本語のキー",
    "a😀b",
    "😀",
    "\u07ff\u0800\uffff",
    "x" * 1000,
]


@pytest.mark.parametrize("s", HASH_VECTORS)
def test_java_hash_vectors(s):
    data = s.encode()
    assert lib.rmq_test_java_string_hash(data, len(data)) == java_hash(s)


def test_java_hash_known_values():
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(1 << 31)
    assert java_hash("") == 0


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_java_hash_matches_reference(s):
    data = s.encode("utf-8", "surrogatepass")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
        return  # lone surrogates are not valid UTF-8
    assert lib.rmq_test_java_string_hash(data, len(data)) == java_hash(s)


# --- one IndexFile ------------------------------------------------------------------


def test_layout_is_rocketmq_bytes(tmp_path):
    slots, num = 11, 8
    path = tmp_path / "idx"
    f = IndexFile(path, slots, num)
    assert path.stat().st_size == HEADER + slots * 4 + num * 20
    assert f.header() == (0, 0, 0, 0, 1)
    puts = [
        ("T", "k1", 100, T0),
        ("T", "k2", 200, T0 + 1500),
        ("T", "k1", 300, T0 + 4999),
    ]
    for topic, key, off, ts in puts:
        assert f.put(topic, key, off, ts) == lib.RMQ_OK
    f.close()

    header, slot_vals, entries = parse(path, slots)
    assert header == (T0, T0 + 4999, 100, 300, 2, 4)  # 2 slots in use, next entry 4
    assert entries[0] == (0, 0, 0, 0)  # entry 0 unused
    h1, h2 = key_hash("T", "k1"), key_hash("T", "k2")
    assert entries[1] == (h1, 100, 0, 0)
    assert entries[2] == (h2, 200, 1, 0)
    assert entries[3] == (h1, 300, 4, 1)  # chains to entry 1
    assert slot_vals[h1 % slots] == 3
    assert slot_vals[h2 % slots] == 2


def resident_bytes(path):
    """Bytes of this process's mappings of path in memory (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line
                inside = line.rstrip().endswith(" " + str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def test_a_new_file_faults_in_its_hash_slots_not_its_entries(tmp_path):
    """Slots are written at random, so a new file's are faulted in when it
    is made; entries are appended in order and are not (at the default
    sizes they are 400 MB, a second of a core to fault in)."""
    slots, num = 1_000_000, 2_000_000  # 4 MB of slots, 40 MB of entries
    path = tmp_path / "idx"
    f = IndexFile(path, slots, num)
    try:
        assert resident_bytes(path) <= HEADER + slots * 4 + (1 << 20)
        assert f.put("T", "k", 1, T0) == lib.RMQ_OK and f.select("T", "k") == [1]
    finally:
        f.close()


def test_min_value_hash_is_zero(tmp_path):
    key = MIN_VALUE_KEY
    assert java_hash(f"T#{key}") == -(1 << 31)
    slots = 7
    f = IndexFile(tmp_path / "idx", slots, 4)
    assert f.put("T", key, 42, T0) == lib.RMQ_OK
    assert f.select("T", key) == [42]
    f.close()
    _, slot_vals, entries = parse(tmp_path / "idx", slots)
    assert entries[1][0] == 0
    assert slot_vals[0] == 1


def test_select_newest_first_and_max(tmp_path):
    f = IndexFile(tmp_path / "idx", 3, 64)
    for i in range(20):
        assert (
            f.put("T", "k" if i % 2 == 0 else "other", i, T0 + i * 1000) == lib.RMQ_OK
        )
    assert f.select("T", "k") == list(range(18, -1, -2))
    assert f.select("T", "k", max_n=3) == [18, 16, 14]
    assert f.select("T", "k", max_n=0) == []
    assert f.select("T", "missing") == []
    assert f.select("U", "k") == []
    f.close()


def test_full_file(tmp_path):
    f = IndexFile(tmp_path / "idx", 5, 4)
    for i in range(3):
        assert f.put("T", f"k{i}", i, T0 + i) == lib.RMQ_OK
    assert f.put("T", "k9", 9, T0) == lib.RMQ_EFULL
    assert f.header()[4] == 4
    assert f.select("T", "k2") == [2]
    f.close()


def test_time_diff_clamped(tmp_path):
    slots = 5
    f = IndexFile(tmp_path / "idx", slots, 8)
    f.put("T", "a", 1, T0)
    f.put("T", "b", 2, T0 - 5000)  # clock went back: clamped to 0
    f.put("T", "c", 3, T0 + (2**31 + 10) * 1000)  # beyond int32 seconds
    f.close()
    _, _, entries = parse(tmp_path / "idx", slots)
    assert [e[2] for e in entries[1:4]] == [0, 0, 2**31 - 1]


def test_time_range_single_file(tmp_path):
    f = IndexFile(tmp_path / "idx", 7, 64)
    for i in range(10):
        f.put("T", "k", i, T0 + i * 1000)
    assert f.select("T", "k", T0 + 3000, T0 + 6000) == [6, 5, 4, 3]
    assert f.select("T", "k", T0 + 3001, T0 + 5999) == [5, 4, 3]  # second granularity
    assert f.select("T", "k", T0 + 9001, T0 + 99_000) == [9]
    assert f.select("T", "k", T0 - 10_000, T0 - 1) == []
    assert f.select("T", "k", T0 + 20_000, T0 + 30_000) == []
    f.close()


def test_reopen_file(tmp_path):
    path = tmp_path / "idx"
    f = IndexFile(path, 13, 32)
    for i in range(10):
        f.put("T", f"k{i % 3}", 1000 + i, T0 + i * 10)
    before = f.header()
    f.close()
    f = IndexFile(path, 13, 32, create=False)
    assert f.header() == before
    assert f.select("T", "k1") == [1007, 1004, 1001]
    assert f.put("T", "k1", 2000, T0 + 500) == lib.RMQ_OK
    assert f.select("T", "k1") == [2000, 1007, 1004, 1001]
    f.close()


def test_a_put_torn_between_slot_and_count_is_undone_on_reopen(tmp_path):
    """A process killed after a put wrote its entry and the slot's head but
    not the header's count: reopened, the slot must lead to its older
    entries again, before and after the next put takes the position."""
    path, slots = tmp_path / "idx", 13
    f = IndexFile(path, slots, 32)
    for i in range(6):
        f.put("T", f"k{i % 2}", 1000 + i, T0 + i * 10)
    f.close()
    header, slot_vals, _ = parse(path, slots)
    count = header[5]
    h = key_hash("T", "k0")
    slot = h % slots
    data = bytearray(path.read_bytes())
    entry = HEADER + 4 * slots + 20 * count
    data[entry : entry + 20] = struct.pack(">iqii", h, 2000, 1, slot_vals[slot])
    data[HEADER + 4 * slot : HEADER + 4 * slot + 4] = struct.pack(">i", count)
    path.write_bytes(bytes(data))
    f = IndexFile(path, slots, 32, create=False)
    assert f.header()[4] == count  # the torn entry is not counted
    assert f.select("T", "k0") == [1004, 1002, 1000]
    other = next(f"x{i}" for i in range(100) if key_hash("T", f"x{i}") % slots != slot)
    assert f.put("T", other, 3000, T0 + 100) == lib.RMQ_OK  # takes position count
    assert f.select("T", "k0") == [1004, 1002, 1000]
    assert f.select("T", other) == [3000]
    f.close()


def test_open_missing_without_create(tmp_path):
    out = ffi.new("rmq_index_file_t **")
    rc = lib.rmq_index_file_open(str(tmp_path / "nope").encode(), 5, 5, 0, out)
    assert rc < 0 and out[0] == ffi.NULL
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("delta", [-1, 1, -20])
def test_wrong_size_rejected(tmp_path, delta):
    path = tmp_path / "idx"
    IndexFile(path, 5, 5).close()
    size = path.stat().st_size
    os.truncate(path, size + delta)
    out = ffi.new("rmq_index_file_t **")
    for create in (0, 1):
        assert (
            lib.rmq_index_file_open(str(path).encode(), 5, 5, create, out)
            == lib.RMQ_ECORRUPT
        )
    assert path.stat().st_size == size + delta  # not "repaired"
    # other geometry than the file was made with
    os.truncate(path, size)
    assert lib.rmq_index_file_open(str(path).encode(), 6, 5, 0, out) == lib.RMQ_ECORRUPT
    assert lib.rmq_index_file_open(str(path).encode(), 5, 5, 0, out) == lib.RMQ_OK
    lib.rmq_index_file_close(out[0], 0)


def test_bad_args(tmp_path):
    out = ffi.new("rmq_index_file_t **")
    p = str(tmp_path / "idx").encode()
    assert lib.rmq_index_file_open(p, 0, 5, 1, out) == lib.RMQ_EBAD_ARG
    assert lib.rmq_index_file_open(p, 5, 0, 1, out) == lib.RMQ_EBAD_ARG
    so = ffi.new("rmq_index_service_t **")
    assert (
        lib.rmq_index_service_open(str(tmp_path).encode(), 0, 5, so) == lib.RMQ_EBAD_ARG
    )


def test_corrupt_chain_terminates(tmp_path):
    slots, num = 3, 8
    path = tmp_path / "idx"
    f = IndexFile(path, slots, num)
    for i in range(3):
        f.put("T", "k", i, T0)
    f.close()
    data = bytearray(path.read_bytes())
    base = HEADER + 4 * slots
    # entry 1 -> entry 3 and entry 3 -> entry 2 -> entry 1: a cycle
    struct.pack_into(">i", data, base + 20 * 1 + 16, 3)
    # an out-of-range slot value is empty
    other = next(
        f"o{i}"
        for i in range(99)
        if key_hash("T", f"o{i}") % slots != key_hash("T", "k") % slots
    )
    struct.pack_into(">i", data, HEADER + 4 * (key_hash("T", other) % slots), 77)
    path.write_bytes(bytes(data))
    f = IndexFile(path, slots, num, create=False)
    got = f.select("T", "k")
    assert len(got) <= 4 and set(got) == {0, 1, 2}  # at most index_count steps
    assert f.select("T", other) == []
    assert f.put("T", other, 9, T0) == lib.RMQ_OK  # 77 is not chained to
    assert f.select("T", other) == [9]
    f.close()


# --- IndexService -----------------------------------------------------------------

topics = st.sampled_from(["T", "TopicA", "tópico", "t😀"])
keys = st.one_of(
    st.text(alphabet="abc", max_size=3),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
)
puts_strategy = st.lists(
    st.tuples(
        topics,
        keys,
        st.integers(0, 2**40),
        st.integers(T0 - 10**8, T0 + 10**8),
    ),
    min_size=1,
    max_size=160,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(puts_strategy)
def test_service_finds_every_put(puts):
    with tempfile.TemporaryDirectory() as d:
        s = Service(d, slots=97, num=50)
        try:
            for topic, key, off, ts in puts:
                s.put(topic, key, off, ts)
            assert len(index_names(d)) == (len(puts) + 48) // 49  # 49 entries a file
            by_hash = {}
            for topic, key, off, _ in puts:
                by_hash.setdefault(key_hash(topic, key), set()).add(off)
            for topic, key, off, _ in puts:
                got = s.query(topic, key, max_n=len(puts) + 1)
                assert len(got) == len(set(got))  # no duplicates
                assert off in got
                # everything returned has this key's hash (collisions allowed)
                assert set(got) == by_hash[key_hash(topic, key)]
        finally:
            s.close()


def test_service_time_range_across_files(tmp_path):
    s = Service(tmp_path, slots=17, num=11)  # 10 entries a file
    for i in range(100):
        s.put("T", "k", i, T0 + i * 1000)
        s.put("T", f"noise{i}", 1000 + i, T0 + i * 1000)
    assert len(index_names(tmp_path)) == 20
    assert s.query("T", "k", T0 + 25_000, T0 + 47_000) == list(range(47, 24, -1))
    assert s.query("T", "k", T0 + 25_000, T0 + 47_000, max_n=5) == [47, 46, 45, 44, 43]
    assert s.query("T", "k", T0 + 99_500, T0 + 10**6) == [99]
    assert s.query("T", "k", T0 + 200_000, T0 + 300_000) == []
    assert s.query("T", "k", T0 + 30_000, T0 + 20_000) == []  # empty range
    assert s.query("T", "k", max_n=1000) == list(range(99, -1, -1))
    s.close()


def test_service_dedups_offsets(tmp_path):
    s = Service(tmp_path, slots=5, num=4)
    for _ in range(7):  # the same offset indexed again (re-dispatch) across files
        s.put("T", "k", 77, T0)
    s.put("T", "k", 78, T0 + 1)
    assert s.query("T", "k", max_n=10) == [78, 77]
    assert s.query("T", "k", max_n=2) == [78, 77]
    s.close()


def test_service_reopen(tmp_path):
    s = Service(tmp_path, slots=31, num=20)
    expected = {}
    for i in range(150):
        key = f"key-{i % 13}"
        s.put("Topic", key, i * 100, T0 + i)
        expected.setdefault(key, []).append(i * 100)
    end = s.end_phy_offset()
    names = index_names(tmp_path)
    s.close()

    s = Service(tmp_path, slots=31, num=20)
    assert index_names(tmp_path) == names
    assert s.end_phy_offset() == end == 149 * 100
    for key, offs in expected.items():
        assert s.query("Topic", key) == offs[::-1]
    s.put("Topic", "key-0", 99_999, T0 + 1000)
    assert s.query("Topic", "key-0", max_n=1) == [99_999]
    s.close()


def test_service_file_names(tmp_path):
    s = Service(tmp_path, slots=3, num=2)  # one entry a file: rolls every put
    lo = time.strftime("%Y%m%d%H%M%S", time.localtime(time.time() - 1))
    for i in range(30):
        s.put("T", "k", i, T0 + i)
    s.close()
    names = index_names(tmp_path)
    assert len(names) == 30
    assert names[0] >= lo
    # sorted names are creation order, even within one millisecond
    begins = []
    for name in names:
        f = IndexFile(tmp_path / name, 3, 2, create=False)
        begins.append(f.header()[2])
        f.close()
    assert begins == list(range(30))


def test_service_open_skips_foreign_and_rejects_bad_files(tmp_path):
    (tmp_path / "README").write_text("not an index")
    (tmp_path / "2024010100000000").write_bytes(b"x")  # 16 digits: not ours
    (tmp_path / "20240101000000000").write_bytes(b"")  # creat without fallocate
    s = Service(tmp_path, slots=7, num=5)
    assert s.end_phy_offset() == -1
    assert s.query("T", "k") == []
    s.put("T", "k", 5, T0)
    s.close()
    assert not (tmp_path / "20240101000000000").exists()
    assert (tmp_path / "README").exists()

    (tmp_path / "20240101000000001").write_bytes(b"\0" * 10)
    out = ffi.new("rmq_index_service_t **")
    assert (
        lib.rmq_index_service_open(str(tmp_path).encode(), 7, 5, out)
        == lib.RMQ_ECORRUPT
    )
    os.unlink(tmp_path / "20240101000000001")
    # geometry differs from the files on disk
    assert (
        lib.rmq_index_service_open(str(tmp_path).encode(), 8, 5, out)
        == lib.RMQ_ECORRUPT
    )


def test_service_creates_dir(tmp_path):
    d = tmp_path / "a" / "b" / "index"
    s = Service(d)
    s.put("T", "k", 1, T0)
    assert s.query("T", "k") == [1]
    s.close()
    assert len(index_names(d)) == 1


def test_delete_before(tmp_path):
    s = Service(tmp_path, slots=11, num=11)  # 10 entries a file
    for i in range(45):  # files end at 9, 19, 29, 39; 44 is the newest
        s.put("T", f"k{i}", i, T0 + i)
    assert len(index_names(tmp_path)) == 5
    assert s.delete_before(9) == 0  # end 9 is not < 9
    assert s.delete_before(10) == 1
    assert s.query("T", "k5") == []
    assert s.query("T", "k10") == [10]
    assert len(index_names(tmp_path)) == 4
    assert s.delete_before(35) == 2
    assert s.query("T", "k29") == []
    assert s.query("T", "k30") == [30]
    assert s.delete_before(10**9) == 1  # never the newest file
    assert index_names(tmp_path) and len(index_names(tmp_path)) == 1
    assert s.query("T", "k44") == [44]
    assert s.end_phy_offset() == 44
    s.close()


def test_truncate(tmp_path):
    s = Service(tmp_path, slots=11, num=11)
    for i in range(45):  # files begin at 0, 10, 20, 30, 40
        s.put("T", f"k{i}", i, T0 + i)
    assert s.truncate(31) == 1
    assert s.end_phy_offset() == 39
    assert s.query("T", "k40") == []
    assert s.truncate(30) == 1
    assert s.end_phy_offset() == 29
    assert len(index_names(tmp_path)) == 3
    s.put("T", "k30", 30, T0 + 30)  # the last file (20..29) is full: rolls
    assert len(index_names(tmp_path)) == 4
    assert s.query("T", "k30") == [30]
    assert s.truncate(0) == 4
    assert s.end_phy_offset() == -1
    assert index_names(tmp_path) == []
    s.put("T", "k", 1, T0)
    assert s.query("T", "k") == [1]
    s.close()
