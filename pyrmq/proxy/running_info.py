"""What the broker's admin requests ask of a 5.x consumer, asked over its
Telemetry stream, as RocketMQ 5's proxy does:

- GET_CONSUMER_RUNNING_INFO (307, mqadmin consumerStatus): a
  ConsumerRunningInfo body made from the Settings the client reported
  (PROP_* properties, its subscriptions), with ``jstack`` the client's own
  thread stacks when it answers a PrintThreadStackTraceCommand within a
  few seconds (the Java SDK does; the Python SDK 5.1.2 does not, and its
  running info comes without them).
- CONSUME_MESSAGE_DIRECTLY (309): a VerifyMessageCommand with the message;
  the client's VerifyMessageResult makes a ConsumeMessageDirectlyResult
  (CR_SUCCESS), no answer in time is the broker's usual timeout answer.

``heartbeat_data`` is the HeartbeatData consumer entry the broker's
consumer table keeps for a 5.x consumer."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from pyrmq.common.message import decode_messages
from pyrmq.proxy.convert import incoming
from pyrmq.proxy.protocol import pb
from pyrmq.remoting import RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from pyrmq.proxy.clients import GrpcClient

#: how long running info waits for a client's thread stacks (s)
JSTACK_WAIT = 3.0


def _subscriptions(settings: Any) -> list[dict[str, Any]]:
    out = []
    for e in settings.subscription.subscriptions:
        sql = e.expression.type == pb.SQL
        out.append(
            {
                "topic": e.topic.name,
                "subString": e.expression.expression or "*",
                "expressionType": "SQL92" if sql else "TAG",
                "subVersion": 0,
                "classFilterMode": False,
            }
        )
    return out


def heartbeat_data(settings: Any) -> dict[str, Any]:
    return {
        "groupName": settings.subscription.group.name,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": _subscriptions(settings),
    }


async def running_info(client: GrpcClient, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
    s = client.settings
    ua = s.user_agent if s is not None else pb.UA()
    props = {
        "PROP_CONSUME_TYPE": "CONSUME_POP",
        "PROP_CLIENT_VERSION": ua.version,
        "PROP_CLIENT_LANGUAGE": pb.Language.Name(ua.language),
        "PROP_CLIENT_PLATFORM": ua.platform,
        "PROP_CLIENT_HOSTNAME": ua.hostname,
        "PROP_CLIENT_TYPE": pb.ClientType.Name(s.client_type) if s is not None else "",
        "PROP_CONSUMEORDERLY": str(bool(s and s.subscription.fifo)).lower(),
    }
    body: dict[str, Any] = {
        "properties": props,
        "subscriptionSet": _subscriptions(s) if s is not None else [],
        "mqTable": {},
        "statusTable": {},
    }
    nonce = uuid.uuid4().hex
    ask = pb.TelemetryCommand(
        print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce=nonce)
    )
    try:
        stack = await client.ask(ask, nonce, min(timeout, JSTACK_WAIT))
        body["jstack"] = stack.thread_stack_trace
    except Exception as e:  # no stream, no answer: the info without stacks
        body["jstack"] = f"(the client did not send its thread stacks: {type(e).__name__})"
    return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


async def consume_directly(
    client: GrpcClient, cmd: RemotingCommand, timeout: float
) -> RemotingCommand:
    msgs = decode_messages(cmd.body) if cmd.body else []
    if not msgs:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark="no message to consume")
    nonce = uuid.uuid4().hex
    ask = pb.TelemetryCommand(
        verify_message_command=pb.VerifyMessageCommand(nonce=nonce, message=incoming(msgs[0]))
    )
    start = time.monotonic()
    answer = await client.ask(ask, nonce, timeout)
    ok = answer.status.code in (0, pb.Code.OK) if answer.HasField("status") else True
    result = {
        "order": False,
        "autoCommit": True,
        "consumeResult": "CR_SUCCESS" if ok else "CR_THROW_EXCEPTION",
        "remark": answer.status.message if answer.HasField("status") else "",
        "spentTimeMills": int((time.monotonic() - start) * 1000),
    }
    return cmd.response(ResponseCode.SUCCESS, body=json.dumps(result).encode())
