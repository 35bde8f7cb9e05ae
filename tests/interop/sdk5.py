"""The official RocketMQ 5.x Python SDK, for the gRPC proxy's interop tests.

PyPI's ``rocketmq-python-client`` installs its code as the top-level package
``rocketmq``, as the C++ client's wheel (``rocketmq==0.4.4``, the 4.x
judge) does: in one folder the two overwrite each other's
``rocketmq/__init__.py``, and both register ``apache.rocketmq.v2`` protobuf
names that pyrmq's proxy registers too. So the SDK goes into a folder of its
own (``.test-deps/`` in the repository, made on first use with ``pip install
--no-deps --target``; its dependencies are pyrmq's test extras) and runs in
subprocesses (``sdk5_driver.py``) with that folder first on PYTHONPATH."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.interop.conftest import StandaloneServer

SDK = "rocketmq-python-client==5.1.2"
REPO = pathlib.Path(__file__).resolve().parents[2]
TARGET = REPO / ".test-deps" / SDK.replace("==", "-")
DRIVER = pathlib.Path(__file__).with_name("sdk5_driver.py")


def sdk_path() -> pathlib.Path:
    """The folder holding the SDK (installed on first use)."""
    if (TARGET / "rocketmq" / "v5").is_dir():
        return TARGET
    part = TARGET.with_name(TARGET.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(part), SDK],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0:
        pytest.fail(f"could not install {SDK} for the interop tests:\n{r.stderr[-2000:]}")
    part.rename(TARGET)
    return TARGET


def run(verb: str, timeout: float = 120.0, **args: Any) -> list[dict[str, Any]]:
    """One driver verb to its end: the JSON lines it printed. AssertionError
    (with its output) when it fails or outlives timeout."""
    p = start(verb, **args)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=10)
        raise AssertionError(f"sdk5 {verb} ran over {timeout} s:\n{out}\n{err[-3000:]}") from None
    if p.returncode != 0:
        raise AssertionError(f"sdk5 {verb} exited {p.returncode}:\n{out}\n{err[-3000:]}")
    return parse(out)


def start(verb: str, **args: Any) -> subprocess.Popen[str]:
    """The driver running verb, its stdout a pipe of JSON lines."""
    env = dict(os.environ, PYTHONPATH=str(sdk_path()), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(DRIVER), verb, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
        start_new_session=True,
    )


def parse(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


# -- what the 5.x tests share: topics and groups made with the admin CLI --

QUEUES = 4


def admin(server: StandaloneServer, *args: str) -> None:
    cmd = [sys.executable, "-m", "pyrmq", "admin", *args, "-n", server.namesrv]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r


def make_topic(server: StandaloneServer, message_type: str = "NORMAL") -> str:
    """A topic of QUEUES queues and that message.type (none at all for "",
    as a topic made for 4.x clients), its route served."""
    from tests.interop.cpp import unique

    name = unique("C5")
    typed = ["-a", f"+message.type={message_type}"] if message_type else []
    admin(server, "updateTopic", "-b", server.broker, "-t", name, "-r", str(QUEUES),
          "-w", str(QUEUES), *typed)  # fmt: skip
    wait_readable_queues(server.namesrv, name, QUEUES)
    return name


def wait_readable_queues(namesrv: str, topic: str, want: int, timeout: float = 30.0) -> None:
    """Until the name server's route of `topic` has `want` readable queues
    (AssertionError after `timeout` s). Asked with pyrmq's AdminClient: the
    4.x C++ client is loaded only by the tests it judges (every client made
    means a shutdown, where rocketmq 0.4.4 has been seen to abort,
    tests/interop/conftest.py)."""
    from pyrmq.admin import AdminClient
    from pyrmq.common.errors import RMQError
    from tests._waiting import wait_until

    async def wait() -> None:
        async with AdminClient(namesrv) as adm:

            async def routed() -> bool:
                try:
                    route = await adm.topic_route(topic)
                except RMQError:  # no route yet, or a timeout on a loaded machine
                    return False
                return sum(q.read_queue_nums for q in route.queue_datas) == want

            await wait_until(
                routed, f"{want} readable queues of {topic} in the route",
                stall_after=timeout, step=0.2,
            )  # fmt: skip

    asyncio.run(wait())


def make_group(server: StandaloneServer, *settings: str) -> str:
    """A consumer group (updateSubGroup settings, e.g. "-o", "true")."""
    from tests.interop.cpp import unique

    name = unique("GID5")
    admin(server, "updateSubGroup", "-b", server.broker, "-g", name, *settings)
    return name
