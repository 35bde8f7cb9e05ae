"""ACL for the 5.x SDKs (pyrmq/proxy/auth.py): with aclEnable=true the
proxy checks RocketMQ 5's request signature and the account's rights from
plain_acl.yml. The official SDK with good credentials sends and receives;
raw gRPC requests, signed here by an HMAC written independently of pyrmq's,
get UNAUTHORIZED or FORBIDDEN with the reason, and nothing refused is
stored."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import subprocess
import sys
from typing import Any

import grpc

from pyrmq.proxy.protocol import SERVICE, pb
from tests.interop import sdk5
from tests.interop.conftest import REPO, StandaloneServer
from tests.interop.cpp import Clients, pull_walk, unique, wait_route

ACL = """\
accounts:
  - accessKey: writerAK1
    secretKey: writerSK1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {topic}=PUB|SUB
  - accessKey: readerAK1
    secretKey: readerSK1
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: adminAK1
    secretKey: adminSK1
    admin: true
"""


def signed(ak: str, sk: str, client: str = "acl-test") -> tuple[tuple[str, str], ...]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    sig = hmac.new(sk.encode(), now.encode(), hashlib.sha1).hexdigest()
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"
    return (("x-mq-client-id", client), ("x-mq-date-time", now), ("authorization", auth))


def send(channel: grpc.Channel, topic: str, body: bytes, metadata: Any) -> Any:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = unique("id")
    m.system_properties.message_type = pb.NORMAL
    stub = channel.unary_unary(
        f"/{SERVICE}/SendMessage",
        request_serializer=lambda r: r.SerializeToString(),
        response_deserializer=pb.SendMessageResponse.FromString,
    )
    return stub(pb.SendMessageRequest(messages=[m]), metadata=metadata, timeout=30)


def test_acl_on_the_grpc_port(make_server: Any, tmp_path: Any) -> None:
    topic = unique("AclT")
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\n")
    (tmp_path / "plain_acl.yml").write_text(ACL.format(topic=topic))
    srv: StandaloneServer = make_server("--enable-proxy", "--grpc-port", "0", "-c", str(conf))
    env = dict(os.environ, ROCKETMQ_ACCESS_KEY="adminAK1", ROCKETMQ_SECRET_KEY="adminSK1")
    r = subprocess.run(
        [sys.executable, "-m", "pyrmq", "admin", "updateTopic", "-n", srv.namesrv,
         "-b", srv.broker, "-t", topic, "-r", "2", "-w", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r
    # the official SDK, with the writer's credentials
    writer = {"endpoint": srv.grpc, "topic": topic, "ak": "writerAK1", "sk": "writerSK1"}
    sent = sdk5.run("send", n=5, prefix="ok", **writer)
    assert len(sent) == 5
    got = sdk5.run("simple", timeout=120, group=unique("GIDacl"), want=5, seconds=60,
                   invisible_s=20, mode="ack", **writer)  # fmt: skip
    assert sorted(o["recv"] for o in got if "recv" in o) == sorted(s["body"] for s in sent)
    # raw requests: who may not
    ch = grpc.insecure_channel(srv.grpc)
    try:
        refusals = [
            (signed("readerAK1", "readerSK1"), pb.Code.FORBIDDEN, "PUB"),
            (signed("writerAK1", "wrong-secret"), pb.Code.UNAUTHORIZED, "signature"),
            (signed("nobodyAK1", "nobodySK1"), pb.Code.UNAUTHORIZED, "nobodyAK1"),
            ((("x-mq-client-id", "anon"),), pb.Code.UNAUTHORIZED, "not signed"),
        ]
        for metadata, code, why in refusals:
            resp = send(ch, topic, b"refused", metadata)
            assert resp.status.code == code, (metadata, resp.status)
            assert why in resp.status.message, resp.status.message
        ok = send(ch, topic, b"signed-here", signed("writerAK1", "writerSK1"))
        assert ok.status.code == pb.Code.OK, ok.status
    finally:
        ch.close()
    c = Clients(srv.namesrv, credentials=("adminAK1", "adminSK1"))
    try:
        assert wait_route(c, topic, 2) == 2
        stored = pull_walk(c.pull_consumer(), topic, timeout=60)
    finally:
        c.close()
    bodies = sorted(m.body.decode() for m in stored)
    assert bodies == sorted([s["body"] for s in sent] + ["signed-here"]), "no refusal stored"
