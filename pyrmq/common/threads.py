"""The threads servers and clients start beside their event loop, named as
the OS shows them: ``top -H``, ``ps -L``, ``pidstat -t``,
/proc/<pid>/task/<tid>/comm and py-spy. Python 3.11-3.13 name a thread for
Python only, so without this every thread of a broker shows as "python"
and its CPU cannot be told apart per thread. The names follow RocketMQ's
services where one does the same job (FlushCommitLog, AllocateMapped...);
Linux keeps 15 bytes of a name (rmqcore.THREAD_NAME_MAX, csrc/thread_name.h).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import rmqcore

log = logging.getLogger("pyrmq")


def name_os_thread(name: str) -> None:
    """Name the calling thread for the OS (cut to rmqcore.THREAD_NAME_MAX
    bytes). A refusal is logged, never raised: a thread runs as well
    unnamed, and an executor's initializer that raised would break it."""
    try:
        rmqcore.name_thread(name)
    except (OSError, ValueError) as e:
        log.debug("thread not named %r: %s", name, e)


def named_executor(
    name: str, os_name: str | None = None, max_workers: int | None = None
) -> ThreadPoolExecutor:
    """A thread pool whose threads are ``name_<n>`` for Python and
    `os_name`, or `name`, for the OS (max_workers None: Python's default)."""
    return ThreadPoolExecutor(
        max_workers,
        thread_name_prefix=name,
        initializer=name_os_thread,
        initargs=(os_name or name,),
    )


def single_thread_executor(name: str, os_name: str | None = None) -> ThreadPoolExecutor:
    """A one-thread executor (jobs run in order), named as named_executor's."""
    return named_executor(name, os_name, 1)
