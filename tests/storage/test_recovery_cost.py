"""Recovery reads the unflushed tail, not the whole store.

Copying the directory of an open store gives what a process crash leaves
(the page cache's view, with the abort marker present)."""

from __future__ import annotations

import shutil

import rmqcore
from pyrmq.storage import MessageStore
from tests.conftest import small_config


def test_crash_recovery_scans_from_the_checkpoint_segment(tmp_path, run):
    live, crashed = tmp_path / "live", tmp_path / "crashed"

    async def main():
        async with MessageStore(small_config(str(live))) as store:
            for i in range(3000):  # about 9 segments of 1 MiB
                store.put_message_nowait("T", i % 4, b"c" * 3000, b"")
            await store.flush()  # CommitLog, ConsumeQueues, checkpoint
            checkpointed = store.commit_log_max_offset
            for i in range(200):  # the unflushed tail
                store.put_message_nowait("T", i % 4, b"t" * 3000, b"")
            shutil.copytree(live, crashed)
            return checkpointed, store.commit_log_max_offset

    checkpointed, end = run(main())
    seg = 1 << 20
    core = rmqcore.MessageStoreCore(str(crashed), commit_log_file_size=seg,
                                    cq_units_per_file=100, max_message_size=256 * 1024,
                                    index_hash_slot_num=1024, index_num=4096,
                                    warm_mapped_files=False)
    try:
        rec = core.recovery
        assert rec["abnormal"] and rec["checkpoint_valid"]
        assert rec["scan_from"] == checkpointed - checkpointed % seg
        assert rec["commit_log_end"] == end
        assert rec["records_scanned"] < 600  # one segment plus the tail, not 3200
        assert sum(core.max_offset_in_queue("T", q) for q in range(4)) == 3200
        last = core.get_message("T", 3, 799, 1)
        assert rmqcore.decode_records(core.read_ranges(last.ranges))[0]["body"] == b"t" * 3000
    finally:
        core.close()
