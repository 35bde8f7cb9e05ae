"""Shared fixtures: small stores in tmp_path, test certificates, and leak
checks: mapped files after each test, servers after each module.

A test run stopped with SIGTERM (CI's timeout, an operator) stops as on
Ctrl-C, so the servers its tests started are ended by the atexit handler of
pyrmq.testing.cluster: they run in sessions of their own and would
otherwise outlive the run, holding ports and CPU on a shared machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

import rmqcore
from pyrmq.storage import MessageStoreConfig
from pyrmq.testing.certs import CertFiles, make_test_certs, openssl_available
from pyrmq.testing.procs import pyrmq_children


def small_config(root: str, **kw: object) -> MessageStoreConfig:
    """A store config with small files so tests exercise rolling."""
    base: dict[str, object] = dict(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=100 * 20,
        max_message_size=256 * 1024,
        max_hash_slot_num=1024,
        max_index_num=4096,
        warm_mapped_file_enable=False,
    )
    base.update(kw)
    return MessageStoreConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    """Test certificates, made once a run (the TLS tests skip, saying why,
    where openssl is missing)."""
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    return make_test_certs(tmp_path_factory.mktemp("certs"))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def _default_sigterm() -> None:
    with contextlib.suppress(ValueError):  # forked by a thread other than the main one
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    # A process the tests fork is not the test run: SIGTERM ends it as by
    # default. (A Python-level handler runs only between bytecodes of the
    # main thread, so a child blocked in C would outlive its SIGTERM.)
    os.register_at_fork(after_in_child=_default_sigterm)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="tests/chaos: run the full counts (also PYRMQ_CHAOS_LONG=1)",
    )


@pytest.fixture
def run() -> Iterator[object]:
    """run(coro): run a coroutine on a fresh event loop."""
    loop = asyncio.new_event_loop()
    try:
        yield loop.run_until_complete
    finally:
        loop.close()


@pytest.fixture(autouse=True)
def no_leaked_mapped_files() -> Iterator[None]:
    import gc

    before = rmqcore.live_mapped_files()
    yield
    gc.collect()
    assert rmqcore.live_mapped_files() <= before, "a test left mapped files open"


@pytest.fixture(scope="module", autouse=True)
def no_leaked_servers() -> Iterator[None]:
    """Every `python -m pyrmq` process a module's tests and fixtures started
    has ended when the module's fixtures are torn down (this fixture is the
    module's first, so it is torn down last). One left running is ended here,
    by its PID, and named in the error: it runs in a session of its own, so
    nothing else would stop it before the whole run ends, and a run killed
    outright would leave it behind for good."""
    before = pyrmq_children()
    yield
    left = {pid: argv for pid, argv in pyrmq_children().items() if pid not in before}
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, "servers left running by this module (now killed): " + "; ".join(
        f"{pid}: {' '.join(argv)}" for pid, argv in left.items()
    )
