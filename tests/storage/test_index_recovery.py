"""With messageIndexAsync the IndexFiles are built behind the ConsumeQueues.
A crash between the two must not lose keys: recovery re-indexes from the
record after the last indexed one, even when the checkpoint already covers
the records' ConsumeQueue units. (A SIGKILL crash loop found this.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import rmqcore

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
