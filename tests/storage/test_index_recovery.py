"""With messageIndexAsync the IndexFiles are built behind the ConsumeQueues.
A crash between the two must not lose keys: recovery re-indexes from the
last indexed record (again: its keys may be partly indexed), even when the checkpoint covers
the records' ConsumeQueue units. (A SIGKILL crash loop found this.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rmqcore
from tests._cffi_core import load as load_cffi_core

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import rmqcore
    core = rmqcore.MessageStoreCore(sys.argv[1], commit_log_file_size=1 << 20,
                                    index_async=True, warm_mapped_files=False)
    for i in range(200):
        props = rmqcore.encode_properties({"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:031d}"})
        core.put("IdxT", i % 4, b"body %d" % i, props)
    assert core.build_index(20) == 20       # the index lags: 180 records behind
    core.flush_commit_log()
    core.flush_logics()                     # checkpoint: every CQ unit dispatched
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_keys_of_records_indexed_late_survive_a_crash(tmp_path):
    root = str(tmp_path / "store")
    proc = subprocess.run([sys.executable, "-c", CHILD, root], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    core = rmqcore.MessageStoreCore(root, commit_log_file_size=1 << 20, index_async=False)
    try:
        assert core.recovery["abnormal"]
        for i in range(200):
            offs = core.query_message_offsets("IdxT", f"k{i}")
            assert len(offs) == 1, (i, offs)
            assert core.look_message_by_offset(offs[0])["body"] == b"body %d" % i
            assert core.query_message_offsets("IdxT", f"U{i:031d}") == offs
    finally:
        core.close()
    assert os.path.isdir(root)


def test_a_record_whose_keys_span_two_index_files_keeps_them_when_the_second_is_dropped(
    tmp_path,
):
    """A record's keys are index entries of their own, so a full IndexFile can
    hold some of them and the next file the rest. When that next file is
    damaged and dropped, recovery must index the record again from its first
    key, not resume after it because the surviving file names its offset. (A
    damaged-files chaos run found key d000511 gone this way.) A key indexed
    twice is answered once."""
    root = tmp_path / "store"
    small = {"commit_log_file_size": 1 << 20, "index_hash_slot_num": 16, "index_num": 11}
    core = rmqcore.MessageStoreCore(str(root), **small)
    n = 8
    try:
        for i in range(n):  # 3 entries a record (KEYS a b, UNIQ_KEY); 10 a file
            props = rmqcore.encode_properties({"KEYS": f"a{i} b{i}", "UNIQ_KEY": f"U{i:031d}"})
            core.put("SpanT", 0, b"body %d" % i, props)
        core.flush_commit_log()
        core.flush_logics()
    finally:
        core.close()
    files = sorted((root / "index").iterdir())
    assert len(files) >= 2, files
    with open(files[1], "r+b") as f:  # record 3's last two keys live here
        f.truncate(100)
    core = rmqcore.MessageStoreCore(str(root), **small)
    try:
        assert core.recovery["index_files_dropped"] >= 1, core.recovery
        for i in range(n):
            for key in (f"a{i}", f"b{i}", f"U{i:031d}"):
                offs = core.query_message_offsets("SpanT", key)
                assert len(offs) == 1, (key, offs)
                assert core.look_message_by_offset(offs[0])["body"] == b"body %d" % i
    finally:
        core.close()


# -- IndexFiles are flushed on the thorough pass only -------------------------------------

SMALL_INDEX = {"commit_log_file_size": 1 << 20, "index_hash_slot_num": 16, "index_num": 1000}
HEADER, SLOTS = 40, 16 * 4  # rmq_format.h section 4: the header, then the hash slots

MIXED_CHILD = textwrap.dedent(
    """
    import os, shutil, signal, sys
    import rmqcore
    root, side = sys.argv[1], sys.argv[2]
    core = rmqcore.MessageStoreCore(root, commit_log_file_size=1 << 20, index_hash_slot_num=16,
                                    index_num=1000, index_async=False, warm_mapped_files=False)
    def put(i):
        props = rmqcore.encode_properties({"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:031d}"})
        core.put("MixT", i % 4, b"body %d" % i, props)
    for i in range(200):
        put(i)
    core.flush_commit_log()
    core.flush_logics()                       # the thorough pass: the IndexFile is durable
    shutil.copytree(os.path.join(root, "index"), side)   # what the disk holds of it now
    for i in range(200, 300):
        put(i)
    core.flush_commit_log()
    core.flush_logics(2)                      # a pass of every second: ConsumeQueues only
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _crash_with_unflushed_index(tmp_path):
    root, side = str(tmp_path / "store"), str(tmp_path / "flushed-index")
    proc = subprocess.run(
        [sys.executable, "-c", MIXED_CHILD, root, side], capture_output=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    [name] = os.listdir(side)
    return root, os.path.join(root, "index", name), os.path.join(side, name)


def _every_key_found(core, n=300):
    for i in range(n):
        offs = core.query_message_offsets("MixT", f"k{i}")
        assert len(offs) == 1, (i, offs)
        assert core.look_message_by_offset(offs[0])["body"] == b"body %d" % i


def test_after_the_machine_went_down_an_index_file_not_flushed_is_built_again(tmp_path):
    """The machine went down after the last thorough flush: its disk kept
    some pages written since and lost others. Here the hash slots are the
    new ones and the header and entries the flushed ones, so slots point at
    entries that are zeros and old keys' chains are cut. The abort marker
    names another boot: recovery drops the IndexFile and indexes every
    record again."""
    root, live, flushed = _crash_with_unflushed_index(tmp_path)
    with open(flushed, "rb") as f:
        old = f.read()
    with open(live, "r+b") as f:
        new = bytearray(f.read())
        new[:HEADER] = old[:HEADER]
        new[HEADER + SLOTS :] = old[HEADER + SLOTS :]
        f.seek(0)
        f.write(new)
    with open(os.path.join(root, "abort"), "w") as f:
        f.write("00000000-0000-0000-0000-000000000000")
    core = rmqcore.MessageStoreCore(root, **SMALL_INDEX)
    try:
        rec = core.recovery
        assert rec["abnormal"] and rec["other_boot"] and rec["index_files_dropped"] == 1, rec
        _every_key_found(core)
    finally:
        core.close()


def test_after_the_process_died_the_index_file_is_kept(tmp_path):
    """Only the process died: the page cache kept every write, the abort
    marker names this boot, and the IndexFile is used as it is."""
    root, _, _ = _crash_with_unflushed_index(tmp_path)
    core = rmqcore.MessageStoreCore(root, **SMALL_INDEX)
    try:
        rec = core.recovery
        assert rec["abnormal"] and not rec["other_boot"] and rec["index_files_dropped"] == 0, rec
        _every_key_found(core)
    finally:
        core.close()
    # a clean close: the marker is gone and the next open trusts everything
    core = rmqcore.MessageStoreCore(root, **SMALL_INDEX)
    try:
        assert not core.recovery["abnormal"] and not core.recovery["other_boot"]
    finally:
        core.close()


def _checkpoint_index_ts(root) -> int:
    """index_msg_timestamp, as the store's own reader loads it."""
    pytest.importorskip("cffi")
    ffi, lib = load_cffi_core()
    cp = ffi.new("rmq_checkpoint_t *")
    assert lib.rmq_checkpoint_load(os.path.join(root, "checkpoint").encode(), cp) == lib.RMQ_OK
    return int(cp.index_msg_timestamp)


def test_index_files_are_flushed_on_the_thorough_pass_only(tmp_path):
    """flush_logics(least_pages > 0) is the pass of every second: ConsumeQueues
    only. The checkpoint's index_msg_timestamp moves with the thorough pass
    (least_pages 0), which flushes the IndexFiles."""
    root = str(tmp_path / "store")
    core = rmqcore.MessageStoreCore(root, **SMALL_INDEX)
    try:

        def put(i):
            props = rmqcore.encode_properties({"KEYS": f"k{i}"})
            return core.put("FlushT", 0, b"body", props)

        put(0)
        core.flush_logics()
        first = _checkpoint_index_ts(root)
        assert first > 0
        stamp = first
        for i in range(1, 200):  # until a record's store time differs (ms clock)
            time.sleep(0.002)
            stamp = core.look_message_by_offset(put(i).phys_offset)["store_timestamp"]
            if stamp > first:
                break
        assert stamp > first
        core.flush_logics(2)
        assert _checkpoint_index_ts(root) == first
        core.flush_logics()
        assert _checkpoint_index_ts(root) == stamp
    finally:
        core.close()
