"""The official RocketMQ 5.x Node.js SDK (rocketmq-client-nodejs 1.0.8 from
npm, installed by this test into .test-deps/) through the gRPC proxy:
sends, then a SimpleConsumer receiving and acking them, and the 4.x C++
client reading what Node sent. Needs node and npm (skipped, saying so,
where they are missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.interop.conftest import REPO, StandaloneServer
from tests.interop.cpp import Clients, pull_walk, unique, wait_route
from tests.interop.sdk5 import make_group, make_topic

PACKAGE = "rocketmq-client-nodejs@1.0.8"
TARGET = REPO / ".test-deps" / "node"
DRIVER = REPO / "tests" / "interop" / "nodejs_sdk_driver.mjs"


@pytest.fixture(scope="module")
def server(proxy_server: StandaloneServer) -> StandaloneServer:
    return proxy_server


def node_sdk() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the Node.js SDK cannot run")
    if (TARGET / "node_modules" / "rocketmq-client-nodejs").is_dir():
        return
    TARGET.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(TARGET), PACKAGE],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if r.returncode != 0:
        pytest.fail(f"npm install {PACKAGE} failed:\n{r.stderr[-2000:]}")


def test_nodejs_sdk_sends_and_receives(server: StandaloneServer, clients: Clients) -> None:
    node_sdk()
    topic, group = make_topic(server), make_group(server)
    # node resolves the package from the script's folder upwards, or NODE_PATH
    env = {"NODE_PATH": str(TARGET / "node_modules"), "PATH": os.environ["PATH"]}
    script = TARGET / DRIVER.name  # ESM imports resolve next to the script
    shutil.copyfile(DRIVER, script)
    r = subprocess.run(
        ["node", str(script), server.grpc, topic, group, "10"],
        capture_output=True, text=True, timeout=180, env=env, cwd=str(TARGET),
    )  # fmt: skip
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    sent = [o for o in lines if "sent" in o]
    got = [o for o in lines if "recv" in o]
    assert r.returncode == 0 and len(sent) == 10, (r.returncode, r.stdout, r.stderr[-2000:])
    assert sorted(o["recv"] for o in got) == sorted(o["sent"] for o in sent), r.stderr[-2000:]
    assert {o["id"] for o in got} == {o["id"] for o in sent}
    assert all(o["tag"] == "TagN" for o in got)
    assert wait_route(clients, topic) > 0
    pulled = pull_walk(clients.pull_consumer(unique("GID_pull_node")), topic, timeout=60)
    assert sorted(m.body.decode() for m in pulled) == sorted(o["sent"] for o in sent)
    assert {m.msg_id for m in pulled} == {o["id"] for o in sent}
