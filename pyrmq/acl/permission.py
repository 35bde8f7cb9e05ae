"""Permissions of ACL 1.0 (RocketMQ's acl.common.Permission) and the
resources each request code needs (PlainAccessResource.parse).

Rights are bit flags: DENY 1, ANY 2, PUB 4, SUB 8. plain_acl.yml spells
them `PUB`, `SUB`, `PUB|SUB` (or `SUB|PUB`) and `DENY`; a missing default
is DENY. A group's rights are kept under its retry topic `%RETRY%<group>`,
so one map holds topics and groups and a key tells which it is.

Per request code (request header extFields, or the JSON body):

  code  request                      resource : right needed
    10  SEND_MESSAGE                 topic : PUB  (a %RETRY% topic: SUB, a group's)
   310  SEND_MESSAGE_V2              b : PUB      (same)
   320  SEND_BATCH_MESSAGE           b or topic : PUB
    36  CONSUMER_SEND_MSG_BACK       %RETRY%group : SUB, originTopic : PUB if given
    11  PULL_MESSAGE                 topic : SUB, %RETRY%consumerGroup : SUB
    12  QUERY_MESSAGE                topic : SUB
    14  QUERY_CONSUMER_OFFSET        topic : SUB, %RETRY%consumerGroup : SUB
    15  UPDATE_CONSUMER_OFFSET       topic : SUB, %RETRY%consumerGroup : SUB
    34  HEART_BEAT                   body consumerDataSet[]: %RETRY%groupName : SUB,
                                     each subscriptionDataSet[].topic : SUB
    35  UNREGISTER_CLIENT            %RETRY%consumerGroup : SUB (when given)
    38  GET_CONSUMER_LIST_BY_GROUP   %RETRY%consumerGroup : SUB
 41/42  LOCK/UNLOCK_BATCH_MQ         body consumerGroup : %RETRY%group : SUB
200050  POP_MESSAGE                  topic : SUB, %RETRY%consumerGroup : SUB
200051  ACK_MESSAGE                  topic : SUB, %RETRY%consumerGroup : SUB
200053  CHANGE_MESSAGE_INVISIBLETIME topic : SUB, %RETRY%consumerGroup : SUB

The three POP codes: ACL 1.0's PlainAccessResource.parse of a remoting
request has no case for them (it asks nothing but the signature); its gRPC
twin, and ACL 2.0's context builder, ask SUB on the topic and the group for
ReceiveMessage/AckMessage/ChangeInvisibleDuration, which these requests
carry for RocketMQ 5's proxy, so pyrmq asks the same. GET_TOPIC_CONFIG 351
and GET_SUBSCRIPTIONGROUP_CONFIG 352 need no resource right (ACL 1.0 parses
none for them; they are no ADMIN_CODES either).

Any other code needs no resource right, only a valid signature of a known
account. ADMIN_CODES need an account with `admin: true`: RocketMQ's list
(UPDATE_AND_CREATE_TOPIC 17, UPDATE_BROKER_CONFIG 25, DELETE_TOPIC_IN_BROKER
215, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, DELETE_SUBSCRIPTIONGROUP 207,
and since 5.x the ACL codes 50, 51, 52) plus 53 and 54, which change the
global white list and return every account's secret key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DENY = 1
ANY = 2
PUB = 4
SUB = 8

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"

_PERM_TEXT = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}

# RequestCode values (pyrmq.remoting.codes; ACL imports only pyrmq.common,
# tests/acl checks these against RequestCode)
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_MESSAGE = 12
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
UPDATE_AND_CREATE_TOPIC = 17
UPDATE_BROKER_CONFIG = 25
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
CONSUMER_SEND_MSG_BACK = 36
GET_CONSUMER_LIST_BY_GROUP = 38
LOCK_BATCH_MQ = 41
UNLOCK_BATCH_MQ = 42
UPDATE_AND_CREATE_ACL_CONFIG = 50
DELETE_ACL_CONFIG = 51
GET_BROKER_CLUSTER_ACL_INFO = 52
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
GET_BROKER_CLUSTER_ACL_CONFIG = 54
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
DELETE_SUBSCRIPTIONGROUP = 207
DELETE_TOPIC_IN_BROKER = 215
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053

ADMIN_CODES = frozenset(
    {
        UPDATE_AND_CREATE_TOPIC,
        UPDATE_BROKER_CONFIG,
        DELETE_TOPIC_IN_BROKER,
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        DELETE_SUBSCRIPTIONGROUP,
        UPDATE_AND_CREATE_ACL_CONFIG,
        DELETE_ACL_CONFIG,
        GET_BROKER_CLUSTER_ACL_INFO,
        UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        GET_BROKER_CLUSTER_ACL_CONFIG,
    }
)


class ResourceError(ValueError):
    """A request whose resources cannot be read (a bad heartbeat body)."""


def parse_perm(text: str | None) -> int:
    """`PUB|SUB` -> PUB | SUB; None -> DENY. ValueError on anything else
    (RocketMQ quietly reads a typo as DENY; pyrmq says so at load)."""
    if text is None:
        return DENY
    perm = _PERM_TEXT.get(text.strip())
    if perm is None:
        raise ValueError(f"permission {text!r}: expected PUB, SUB, PUB|SUB, SUB|PUB or DENY")
    return perm


def perm_text(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB|SUB"}.get(perm & (PUB | SUB), "DENY")


def check_permission(needed: int, owned: int) -> bool:
    """Whether `owned` grants `needed` (Permission.checkPermission)."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def is_group(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _json_body(body: bytes, what: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ResourceError(f"{what} body is not JSON: {e}") from None


def _send_topic(topic: str | None) -> dict[str, int]:
    if not topic:
        return {}
    return {topic: SUB if is_group(topic) else PUB}


def _heartbeat(body: bytes) -> dict[str, int]:
    data = _json_body(body, "HEART_BEAT")
    need: dict[str, int] = {}
    consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
    if not consumers:
        return need
    if not isinstance(consumers, list):
        raise ResourceError("HEART_BEAT consumerDataSet is not a list")
    for c in consumers:
        if not isinstance(c, dict) or not isinstance(c.get("groupName"), str):
            raise ResourceError("HEART_BEAT consumer data without a groupName")
        need[retry_topic(c["groupName"])] = SUB
        for s in c.get("subscriptionDataSet") or ():
            topic = s.get("topic") if isinstance(s, dict) else None
            if not isinstance(topic, str):
                raise ResourceError("HEART_BEAT subscription without a topic")
            need[topic] = SUB
    return need


def _lock_group(body: bytes) -> dict[str, int]:
    data = _json_body(body, "LOCK_BATCH_MQ")
    group = data.get("consumerGroup") if isinstance(data, dict) else None
    if not isinstance(group, str):
        raise ResourceError("LOCK_BATCH_MQ body has no consumerGroup")
    return {retry_topic(group): SUB}


def needed_resources(code: int, ext: Mapping[str, str], body: bytes) -> dict[str, int]:
    """resource -> right needed by a request (table in the module docstring);
    empty for codes that need none. ResourceError on an unreadable body."""
    if code == SEND_MESSAGE_V2:
        return _send_topic(ext.get("b"))
    if code == SEND_MESSAGE:
        return _send_topic(ext.get("topic"))
    if code == SEND_BATCH_MESSAGE:
        return _send_topic(ext.get("b") or ext.get("topic"))
    if code in (
        PULL_MESSAGE,
        QUERY_CONSUMER_OFFSET,
        UPDATE_CONSUMER_OFFSET,
        POP_MESSAGE,
        ACK_MESSAGE,
        CHANGE_MESSAGE_INVISIBLETIME,
    ):
        need: dict[str, int] = {}
        if topic := ext.get("topic"):
            need[topic] = SUB
        if group := ext.get("consumerGroup"):
            need[retry_topic(group)] = SUB
        return need
    if code == HEART_BEAT:
        return _heartbeat(body)
    if code == CONSUMER_SEND_MSG_BACK:
        need = {retry_topic(ext.get("group") or ""): SUB}
        if origin := ext.get("originTopic"):
            need[origin] = PUB
        return need
    if code == QUERY_MESSAGE:
        topic = ext.get("topic")
        return {topic: SUB} if topic else {}
    if code in (UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP):
        group = ext.get("consumerGroup")
        return {retry_topic(group): SUB} if group else {}
    if code in (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ):
        return _lock_group(body)
    return {}
