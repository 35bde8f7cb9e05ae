"""Child process of test_full_disk's sparse-segment test: open the store at
argv[1] (whose disk is full) and write to it. Prints one line: "OPENED n"
after n puts, or "REFUSED <exception>" when the store or a put refused with
an error. A SIGBUS kills this process instead (the test sees -7), which is
why this runs apart from pytest."""

from __future__ import annotations

import asyncio
import sys

from pyrmq.common.errors import StoreError
from pyrmq.storage import MessageStore, MessageStoreConfig


async def main(root: str) -> str:
    cfg = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=4 << 20,
        max_message_size=64 * 1024,
        warm_mapped_file_enable=False,
        message_index_enable=False,
    )
    n = 0
    try:
        async with MessageStore(cfg) as store:
            # past the few pages a sparse copy keeps: into the holes
            for _ in range(3000):
                store.put_message_nowait("T", 0, b"\x5a" * 1000)
                n += 1
    except StoreError as e:
        return f"REFUSED {type(e).__name__}: {e} (after {n} puts)"
    return f"OPENED {n}"


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1])), flush=True)
