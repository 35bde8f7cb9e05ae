"""The gRPC proxy's answers to bad input, from a plain gRPC client built on
pyrmq's own .proto (no SDK: these requests are ones an SDK would not send).
Each is a 5.x Status with a message, or a gRPC status for a request that is
not even the protobuf its RPC takes; the server stays up and stores none of
them."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from pyrmq.proxy.protocol import SERVICE, pb, set_timestamp_ms
from tests.interop.conftest import REPO, StandaloneServer
from tests.interop.cpp import Clients, pull_walk, unique, wait_route

CLIENT = (("x-mq-client-id", "pyrmq-test-client"),)
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def server(proxy_server: StandaloneServer) -> StandaloneServer:
    return proxy_server


@pytest.fixture(scope="module")
def channel(server: StandaloneServer) -> Iterator[grpc.Channel]:
    ch = grpc.insecure_channel(server.grpc)
    yield ch
    ch.close()


def call(channel: grpc.Channel, rpc: str, request: Any, response_type: Any, **kw: Any) -> Any:
    stub = channel.unary_unary(
        f"/{SERVICE}/{rpc}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_type.FromString,
    )
    return stub(request, timeout=TIMEOUT, metadata=kw.get("metadata", CLIENT))


def raw_call(channel: grpc.Channel, rpc: str, data: bytes) -> grpc.RpcError | bytes:
    stub = channel.unary_unary(f"/{SERVICE}/{rpc}")
    try:
        return stub(data, timeout=TIMEOUT, metadata=CLIENT)  # type: ignore[no-any-return]
    except grpc.RpcError as e:
        return e


@pytest.fixture(scope="module")
def topics(server: StandaloneServer) -> dict[str, str]:
    """A NORMAL and a FIFO topic, 2 queues each."""
    out = {}
    c = Clients(server.namesrv)
    try:
        for kind in ("NORMAL", "FIFO"):
            name = unique(f"G{kind}")
            r = subprocess.run(
                [
                    sys.executable, "-m", "pyrmq", "admin", "updateTopic",
                    "-n", server.namesrv, "-b", server.broker, "-t", name,
                    "-r", "2", "-w", "2", "-a", f"+message.type={kind}",
                ],
                cwd=REPO, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert r.returncode == 0, r
            assert wait_route(c, name, 2) == 2
            out[kind] = name
    finally:
        c.close()
    return out


def message(topic: str, body: bytes = b"hello", **system: Any) -> Any:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = system.pop("message_id", unique("id"))
    m.system_properties.message_type = system.pop("message_type", pb.NORMAL)
    for k, v in system.items():
        setattr(m.system_properties, k, v)
    return m


def send(channel: grpc.Channel, *messages: Any, **kw: Any) -> Any:
    return call(
        channel,
        "SendMessage",
        pb.SendMessageRequest(messages=messages),
        pb.SendMessageResponse,
        **kw,
    )


def test_query_route(channel: grpc.Channel, topics: dict[str, str]) -> None:
    ep = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1234)])
    for kind, want in (("NORMAL", pb.NORMAL), ("FIFO", pb.FIFO)):
        req = pb.QueryRouteRequest(endpoints=ep)
        req.topic.name = topics[kind]
        r = call(channel, "QueryRoute", req, pb.QueryRouteResponse)
        assert r.status.code == pb.Code.OK, r.status
        assert [q.id for q in r.message_queues] == [0, 1]
        for q in r.message_queues:
            assert q.permission == pb.READ_WRITE
            assert list(q.accept_message_types) == [want]
            assert q.broker.endpoints == ep, "clients are routed back to the address they used"
    missing = pb.QueryRouteRequest(endpoints=ep)
    missing.topic.name = unique("Missing")
    r = call(channel, "QueryRoute", missing, pb.QueryRouteResponse)
    assert r.status.code == pb.Code.TOPIC_NOT_FOUND and missing.topic.name in r.status.message
    no_endpoints = pb.QueryRouteRequest()
    no_endpoints.topic.name = topics["NORMAL"]
    r = call(channel, "QueryRoute", no_endpoints, pb.QueryRouteResponse)
    assert r.status.code == pb.Code.ILLEGAL_ACCESS_POINT


def test_bad_sends_get_the_proxys_codes(
    server: StandaloneServer, channel: grpc.Channel, topics: dict[str, str]
) -> None:
    normal, fifo = topics["NORMAL"], topics["FIFO"]
    far = message(normal)
    ten_years = 10 * 365 * 86400_000
    set_timestamp_ms(far.system_properties.delivery_timestamp, int(time.time() * 1000) + ten_years)
    reserved = message(normal)
    reserved.user_properties["UNIQ_KEY"] = "mine"
    control = message(normal)
    control.user_properties["k"] = "a\x01b"
    cases = [
        ((message(normal, b""),), pb.Code.MESSAGE_BODY_EMPTY),
        ((message(normal, b"x" * (4 * 1024 * 1024 + 1)),), pb.Code.MESSAGE_BODY_TOO_LARGE),
        ((reserved,), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ((control,), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ((message(normal, message_id=" "),), pb.Code.ILLEGAL_MESSAGE_ID),
        ((message(normal, tag="a|b"),), pb.Code.ILLEGAL_MESSAGE_TAG),
        ((message(normal, tag=" "),), pb.Code.ILLEGAL_MESSAGE_TAG),
        ((far,), pb.Code.ILLEGAL_DELIVERY_TIME),
        ((message(normal, message_type=pb.FIFO, message_group="g"),),
         pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ((message(fifo, message_type=pb.FIFO, message_group="g" * 100),),
         pb.Code.ILLEGAL_MESSAGE_GROUP),
        ((message(normal), message(fifo)), pb.Code.MESSAGE_CORRUPTED),
        ((), pb.Code.MESSAGE_CORRUPTED),
        ((message(unique("Missing")),), pb.Code.TOPIC_NOT_FOUND),
        ((message(""),), pb.Code.ILLEGAL_TOPIC),
    ]  # fmt: skip
    for msgs, code in cases:
        r = send(channel, *msgs)
        assert r.status.code == code, (pb.Code.Name(code), r.status)
        assert r.status.message, "every refusal says why"
    r = send(channel, message(normal), metadata=())
    assert r.status.code == pb.Code.CLIENT_ID_REQUIRED
    ok = send(channel, message(normal, b"the only good one"))
    assert ok.status.code == pb.Code.OK and ok.entries[0].message_id
    c = Clients(server.namesrv)
    try:
        stored = pull_walk(c.pull_consumer(), normal, timeout=TIMEOUT)
    finally:
        c.close()
    assert [m.body for m in stored] == [b"the only good one"], "no refused send was stored"


def test_end_transaction_with_an_id_the_proxy_never_gave(
    channel: grpc.Channel, topics: dict[str, str]
) -> None:
    req = pb.EndTransactionRequest(message_id="x", transaction_id="nonsense", resolution=pb.COMMIT)
    req.topic.name = topics["NORMAL"]
    r = call(channel, "EndTransaction", req, pb.EndTransactionResponse)
    assert r.status.code == pb.Code.INVALID_TRANSACTION_ID, r.status
    req.transaction_id = "10-0-00000000000000000000000000000000"
    r = call(channel, "EndTransaction", req, pb.EndTransactionResponse)
    assert r.status.code != pb.Code.OK and r.status.message, r.status


def test_malformed_protobufs_and_unknown_rpcs(channel: grpc.Channel) -> None:
    e = raw_call(channel, "SendMessage", b"\x0a\xff\xff\xff\xff\x0f")
    assert isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "SendMessageRequest" in (e.details() or "")
    e = raw_call(channel, "NoSuchRpc", b"")
    assert isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.UNIMPLEMENTED, e


def test_fuzzed_requests_leave_the_server_serving(
    server: StandaloneServer, channel: grpc.Channel, topics: dict[str, str]
) -> None:
    """Byte mutations of valid requests to every unary RPC: each answer is a
    response or a gRPC status (never a hang or a dead server); then a valid
    send still works."""
    rng = random.Random(1919)
    seeds = {
        "SendMessage": pb.SendMessageRequest(messages=[message(topics["NORMAL"])]),
        "QueryRoute": pb.QueryRouteRequest(
            topic=pb.Resource(name=topics["FIFO"]),
            endpoints=pb.Endpoints(addresses=[pb.Address(host="h", port=1)]),
        ),
        "Heartbeat": pb.HeartbeatRequest(client_type=pb.PRODUCER),
        "EndTransaction": pb.EndTransactionRequest(
            topic=pb.Resource(name=topics["NORMAL"]), transaction_id="1-2-3", resolution=pb.COMMIT
        ),
        "AckMessage": pb.AckMessageRequest(group=pb.Resource(name="g")),
        "NotifyClientTermination": pb.NotifyClientTerminationRequest(),
    }
    answered = 0
    for i in range(600):
        rpc, seed = rng.choice(sorted(seeds.items()))
        data = bytearray(seed.SerializeToString())
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
            elif data:
                del data[rng.randrange(len(data))]
        got = raw_call(channel, rpc, bytes(data))
        if isinstance(got, grpc.RpcError):
            assert got.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.INTERNAL,
            ), (i, rpc, got)
            assert got.code() != grpc.StatusCode.INTERNAL, (i, rpc, got.details())
        answered += 1
    assert answered == 600
    ok = send(channel, message(topics["NORMAL"], b"after the fuzz"))
    assert ok.status.code == pb.Code.OK, ok.status
    assert server.proc is not None and server.proc.poll() is None
    assert "Traceback" not in server.log_tail(2000)


def receive(channel: grpc.Channel, request: Any) -> list[Any]:
    stub = channel.unary_stream(
        f"/{SERVICE}/ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )
    return list(stub(request, timeout=TIMEOUT, metadata=CLIENT))


def receive_request(topic: str, group: str, **kw: Any) -> Any:
    req = pb.ReceiveMessageRequest(batch_size=kw.pop("batch_size", 8))
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = -1
    set_duration = kw.pop("invisible_ms", 10_000)
    req.invisible_duration.seconds, rest = divmod(set_duration, 1000)
    req.invisible_duration.nanos = rest * 1_000_000
    req.long_polling_timeout.seconds = kw.pop("polling_s", 0)
    if "sql" in kw:
        req.filter_expression.type = pb.SQL
        req.filter_expression.expression = kw.pop("sql")
    assert not kw
    return req


def test_bad_receives_acks_and_changes(channel: grpc.Channel, topics: dict[str, str]) -> None:
    normal = topics["NORMAL"]
    group = unique("GIDbad")
    cases = [
        (receive_request(normal, ""), pb.Code.ILLEGAL_CONSUMER_GROUP),
        (receive_request(normal, "bad group!"), pb.Code.ILLEGAL_CONSUMER_GROUP),
        (receive_request(unique("Missing"), group), pb.Code.TOPIC_NOT_FOUND),
        (receive_request(normal, group, invisible_ms=365 * 86400_000),
         pb.Code.ILLEGAL_INVISIBLE_TIME),
        (receive_request(normal, group, invisible_ms=10), pb.Code.ILLEGAL_INVISIBLE_TIME),
        (receive_request(normal, group, polling_s=3600), pb.Code.ILLEGAL_POLLING_TIME),
        (receive_request(normal, group, batch_size=0), pb.Code.BAD_REQUEST),
        (receive_request(normal, group, batch_size=10_000), pb.Code.BAD_REQUEST),
        (receive_request(normal, group, sql="color = = 'x'"), pb.Code.ILLEGAL_FILTER_EXPRESSION),
        (receive_request(normal, group, sql="color = 'never'"), pb.Code.MESSAGE_NOT_FOUND),
    ]  # fmt: skip
    for req, code in cases:
        answers = receive(channel, req)
        assert len(answers) == 1 and answers[0].status.code == code, (pb.Code.Name(code), answers)
        assert answers[0].status.message
    ack = pb.AckMessageRequest(
        entries=[pb.AckMessageEntry(message_id="m", receipt_handle="not a handle")]
    )
    ack.group.name, ack.topic.name = group, normal
    r = call(channel, "AckMessage", ack, pb.AckMessageResponse)
    assert r.status.code == pb.Code.INVALID_RECEIPT_HANDLE, r
    assert r.entries[0].status.code == pb.Code.INVALID_RECEIPT_HANDLE
    stale = "v1 0 0 0 1 10000 broker-a"  # well formed, never given
    ack.entries[0].receipt_handle = stale
    r = call(channel, "AckMessage", ack, pb.AckMessageResponse)
    assert r.entries[0].status.code == pb.Code.INVALID_RECEIPT_HANDLE, r
    change = pb.ChangeInvisibleDurationRequest(receipt_handle=stale, message_id="m")
    change.group.name, change.topic.name = group, normal
    change.invisible_duration.seconds = 10
    r = call(channel, "ChangeInvisibleDuration", change, pb.ChangeInvisibleDurationResponse)
    assert r.status.code == pb.Code.INVALID_RECEIPT_HANDLE, r
    change.invisible_duration.seconds = 100 * 86400
    r = call(channel, "ChangeInvisibleDuration", change, pb.ChangeInvisibleDurationResponse)
    assert r.status.code == pb.Code.ILLEGAL_INVISIBLE_TIME, r


def end_offsets(channel: grpc.Channel, mq: Any) -> dict[int, int]:
    """QueryOffset END of queues 0 and 1 of mq's topic (mq.id is left at 1)."""
    out = {}
    for qid in (0, 1):
        mq.id = qid
        r = call(channel, "QueryOffset",
                 pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END),
                 pb.QueryOffsetResponse)  # fmt: skip
        assert r.status.code == pb.Code.OK
        out[qid] = r.offset
    return out


def test_pull_consumer_offsets_and_pulls(channel: grpc.Channel, topics: dict[str, str]) -> None:
    topic = topics["FIFO"]
    sent = [message(topic, f"pull-{i}".encode(), message_type=pb.FIFO, message_group="pg")
            for i in range(5)]  # fmt: skip
    for m in sent:
        assert send(channel, m).status.code == pb.Code.OK
    group = unique("GIDpull")
    mq = pb.MessageQueue(topic=pb.Resource(name=topic))
    # the group's queue: where the message group went
    end = end_offsets(channel, mq)
    qid = max(end, key=lambda q: end[q])
    mq.id = qid
    begin = call(channel, "QueryOffset",
                 pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.BEGINNING),
                 pb.QueryOffsetResponse)  # fmt: skip
    assert begin.status.code == pb.Code.OK and begin.offset == 0
    get = pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq)
    r = call(channel, "GetOffset", get, pb.GetOffsetResponse)
    assert r.status.code == pb.Code.OFFSET_NOT_FOUND, r
    pull = channel.unary_stream(
        f"/{SERVICE}/PullMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.PullMessageResponse.FromString,
    )
    req = pb.PullMessageRequest(group=pb.Resource(name=group), message_queue=mq, offset=0,
                                batch_size=32)  # fmt: skip
    answers = list(pull(req, timeout=TIMEOUT, metadata=CLIENT))
    assert answers[0].status.code == pb.Code.OK, answers[0]
    bodies = [a.message.body for a in answers if a.HasField("message")]
    assert [b for b in bodies if b.startswith(b"pull-")] == [m.body for m in sent]
    assert answers[-1].next_offset == end[qid]
    upd = pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq, offset=3)
    assert call(channel, "UpdateOffset", upd, pb.UpdateOffsetResponse).status.code == pb.Code.OK
    assert call(channel, "GetOffset", get, pb.GetOffsetResponse).offset == 3
    upd.offset = -1
    r = call(channel, "UpdateOffset", upd, pb.UpdateOffsetResponse)
    assert r.status.code == pb.Code.ILLEGAL_OFFSET
    req.offset = end[qid]
    answers = list(pull(req, timeout=TIMEOUT, metadata=CLIENT))
    assert (
        answers[0].status.code == pb.Code.MESSAGE_NOT_FOUND and answers[-1].next_offset == end[qid]
    )
    mq.id = 99
    other = pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq)
    r = call(channel, "GetOffset", other, pb.GetOffsetResponse)
    assert r.status.code == pb.Code.BAD_REQUEST and r.status.message


def test_pull_of_bodies_past_the_sendfile_size(
    channel: grpc.Channel, topics: dict[str, str]
) -> None:
    """A pull whose answer a socket would get by sendfile (16 KiB and more,
    transferBySendfileMinBytes) reaches a proxy client whole: the proxy's
    in-process channel takes the answer as a command."""
    topic = topics["FIFO"]
    mq = pb.MessageQueue(topic=pb.Resource(name=topic))
    before = end_offsets(channel, mq)
    bodies = [bytes([65 + i]) * 9000 for i in range(3)]
    for b in bodies:
        m = message(topic, b, message_type=pb.FIFO, message_group="big")
        assert send(channel, m).status.code == pb.Code.OK
    after = end_offsets(channel, mq)
    (qid,) = [q for q in after if after[q] - before[q] == 3]
    mq.id = qid
    pull = channel.unary_stream(
        f"/{SERVICE}/PullMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.PullMessageResponse.FromString,
    )
    req = pb.PullMessageRequest(group=pb.Resource(name=unique("GIDbig")), message_queue=mq,
                                offset=before[qid], batch_size=32)  # fmt: skip
    answers = list(pull(req, timeout=TIMEOUT, metadata=CLIENT))
    assert answers[0].status.code == pb.Code.OK, answers[0]
    assert [a.message.body for a in answers if a.HasField("message")] == bodies
    assert answers[-1].next_offset == after[qid]
