"""An index build (rmq_store_build_index) puts the keys of many records in
one call, so that their hash slots' cache misses overlap. When a put fails
part way (here: the next IndexFile cannot be made), the build's offset must
stop at the record whose key failed, so that the next build indexes it and
every later record, and no earlier record twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SLOTS, ENTRIES = 512, 101  # 100 entries a file: the keys of 50 records
RECORDS = 120

CHILD = textwrap.dedent(
    f"""
    import json, resource, signal, sys
    import rmqcore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead
    core = rmqcore.MessageStoreCore(sys.argv[1], commit_log_file_size=1 << 20,
                                    index_async=True, warm_mapped_files=False,
                                    index_hash_slot_num={SLOTS}, index_num={ENTRIES})
    offsets = []
    for i in range({RECORDS}):
        props = rmqcore.encode_properties({{"UNIQ_KEY": f"U{{i:031d}}", "KEYS": f"k{{i}}"}})
        offsets.append(core.put("IdxT", i % 4, b"body %d" % i, props).phys_offset)
    first = core.build_index(1)  # makes the first IndexFile
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    size = 40 + {SLOTS} * 4 + {ENTRIES} * 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (size - 1, hard))  # no second file
    try:
        core.build_index()
        error = None
    except Exception as e:
        error = f"{{type(e).__name__}}: {{e}}"
    stopped_at = core.index_dispatched
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    rest = core.build_index()
    found = [
        [core.query_message_offsets("IdxT", f"U{{i:031d}}"),
         core.query_message_offsets("IdxT", f"k{{i}}")]
        for i in range({RECORDS})
    ]
    core.close()
    print(json.dumps(dict(first=first, error=error, stopped_at=stopped_at, rest=rest,
                          offsets=offsets, found=found)))
    """
)


def test_a_failed_put_mid_build_resumes_at_the_record_it_failed_on(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "store")],
                          capture_output=True, timeout=120, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["first"] == 1
    assert r["error"] is not None  # the second IndexFile could not be made
    # Records 0..49 fill the first file (two keys each); record 50's first
    # key is the put that failed, whatever batch it was in.
    assert r["stopped_at"] == r["offsets"][50]
    assert r["rest"] == RECORDS - 50
    for i, (uniq, keys) in enumerate(r["found"]):
        assert uniq == [r["offsets"][i]], (i, uniq)  # once: nothing indexed twice
        assert keys == [r["offsets"][i]], (i, keys)
