"""What the hostile-input fuzzers say: the request codes the servers serve
(read from the running servers, never listed by hand), the header fields
and values their processors read, bodies from valid to garbage, and one
valid request of every served code to start mutations from. Used by
tests/integration/test_fuzz_handlers.py (in-process, every code at random)
and tests/chaos/_hostile_fuzz.py (processes, seeded byte mutations).

A request code added to the broker or the name server is fuzzed at once
(the code lists come from RemotingServer.request_codes()); the template
check (test_every_served_code_has_a_template) then asks for a valid request
of it, so the mutations start deep inside its processor rather than at
"lacks header field"."""

from __future__ import annotations

import json
import struct
import zlib
from collections import defaultdict
from typing import Any

import rmqcore
from pyrmq.broker.runtime_config import parse_properties_text
from pyrmq.remoting import RemotingClient, RemotingCommand, RemotingServer
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import heartbeat_body, props, send_fields, v2

Template = tuple[int, dict[str, str], bytes]

#: a code no server serves (answered REQUEST_CODE_NOT_SUPPORTED)
UNKNOWN_CODE = 999

#: codes the derived lists must hold (the admin, transaction, ACL and HA
#: requests the hand-kept lists once missed): a floor, so the coverage
#: cannot shrink silently if registration moves somewhere the servers'
#: tables no longer show
BROKER_FLOOR = frozenset(
    {
        RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        RC.GET_TOPIC_STATS_INFO,
        RC.GET_CONSUMER_CONNECTION_LIST,
        RC.GET_PRODUCER_CONNECTION_LIST,
        RC.DELETE_SUBSCRIPTIONGROUP,
        RC.GET_CONSUME_STATS,
        RC.GET_BROKER_CONFIG,
        RC.UPDATE_BROKER_CONFIG,
        RC.CONSUME_MESSAGE_DIRECTLY,
        RC.GET_CONSUMER_RUNNING_INFO,
        RC.QUERY_TOPIC_CONSUME_BY_WHO,
        RC.QUERY_CONSUME_TIME_SPAN,
        RC.CLONE_GROUP_OFFSET,
        RC.VIEW_BROKER_STATS_DATA,
        RC.GET_BROKER_CONSUME_STATS,
        RC.CHECK_CLIENT_CONFIG,
        RC.END_TRANSACTION,
        RC.GET_PENDING_TRANSACTIONS,
        RC.UPDATE_AND_CREATE_ACL_CONFIG,
        RC.DELETE_ACL_CONFIG,
        RC.GET_BROKER_CLUSTER_ACL_INFO,
        RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RC.GET_BROKER_CLUSTER_ACL_CONFIG,
        RC.NOTIFY_BROKER_ROLE_CHANGED,
        RC.GET_ALL_CONSUMER_OFFSET,
        RC.GET_ALL_DELAY_OFFSET,
        RC.INVOKE_BROKER_TO_RESET_OFFSET,
    }
)
NAMESRV_FLOOR = frozenset({RC.GET_TOPICS_BY_CLUSTER, RC.GET_SYSTEM_TOPIC_LIST_FROM_NS})


def served_codes(server: RemotingServer) -> list[int]:
    """The codes server has processors for, and UNKNOWN_CODE."""
    return sorted({*server.request_codes(), UNKNOWN_CODE})


#: an offset message id (ip, port, CommitLog offset 0) and one whose offset
#: is beyond a Java long
MSG_ID = "7F00000100002A9F0000000000000000"
MSG_ID_HUGE = "7F00000100002A9FFFFFFFFFFFFFFFFF"
#: a POP receipt handle of the broker's form (pyrmq/broker/pop/receipt.py)
#: that names no checkpoint
POP_HANDLE = "v1 0 0 0 1 60000 broker-a"

#: every header field a processor of the broker or the name server reads
KEYS = [
    "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "consumerGroup", "group",
    "offset", "delayLevel", "commitOffset", "suspendTimeoutMillis", "subscription",
    "properties", "bornTimestamp", "flag", "batch", "key", "maxNum", "beginTimestamp",
    "endTimestamp", "timestamp", "readQueueNums", "writeQueueNums", "perm", "producerGroup",
    "clientID", "defaultTopic", "defaultTopicQueueNums", "reconsumeTimes", "maxReconsumeTimes",
    "brokerName", "brokerAddr", "clusterName", "brokerId", "namespace", "value", "b", "e", "m",
    "_UNIQUE_KEY_QUERY", "bodyCrc32", "compressed", "expressionType",
    # admin: groups, connections, consume progress, stats
    "groupName", "removeOffset", "cleanOffset", "srcGroup", "destGroup", "offline", "clientId",
    "jstackEnable", "msgId", "statsName", "statsKey", "isOrder", "isOnline", "isForce",
    "force", "setZeroIfNotFound", "topicFilterType", "topicSysFlag", "order", "subVersion",
    "originMsgId", "originTopic", "unitMode",
    # transactions
    "tranStateTableOffset", "commitLogOffset", "commitOrRollback", "fromTransactionCheck",
    "transactionId", "max",
    # ACL administration
    "accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
    "defaultGroupPerm", "topicPerms", "groupPerms", "globalWhiteAddrs",
    # name server
    "cluster", "haServerAddr", "masterEpoch",
    # POP
    "invisibleTime", "pollTime", "bornTime", "initMode", "expType", "exp", "attemptId",
    "extraInfo",
]  # fmt: skip
VALUES = [
    "", "0", "1", "-1", "7", "abc", "FuzzT", "%RETRY%G", "%DLQ%G", "999999999999999999999",
    "-99999999999999999999", "true", "1.5", "*", "a || b", "TAGS\x01x\x02", "DELAY\x013\x02",
    "DELAY\x01zz\x02", "SCHEDULE_TOPIC_XXXX", "TBW102", "G", "x" * 300, "é✓", "\x00",
    # the edges of Java's int and long, and numbers Java would not parse
    "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
    "1_000", "0x10", "1e3", " 7", "٣",
    # names the admin requests take
    "FuzzG", "FuzzG2", "FuzzPG", "fuzz@1", "DefaultCluster", "127.0.0.1:1", MSG_ID,
    MSG_ID_HUGE, "7F000001", "ZZ" * 16, "TOPIC_PUT_NUMS", "GROUP_GET_NUMS", "BROKER_PUT_NUMS",
    "FuzzT@FuzzG", "false", "TRUE", "8", "12", "DENY", "PUB|SUB", "FuzzT=PUB,FuzzG=SUB",
    "a=NOPE", "10.*.*.*,127.0.0.1", "1.2.3.4.5", "fuzzAK", "short",
    # POP: receipt handles (never given, garbled), times, expression types
    POP_HANDLE, "v1 1 0 0 1 60000 broker-a", "v1 0 -1 x 1 1 b", "v1", "60000", "20000",
    "20001", "SQL92", "TAG",
]  # fmt: skip

#: UPDATE_BROKER_CONFIG bodies (Java properties text): changes a broker
#: takes at runtime, and hostile ones it must refuse whole (unknown or
#: read-at-start keys, non-numbers, out-of-range numbers, separator and
#: newline tricks, a good change beside a bad one)
CONFIG_BODIES = [
    b"longPollingEnable=false\nshortPollingTimeMills=20\n",
    b"longPollingEnable=true\nshortPollingTimeMills=1000\n",
    b"maxReconsumeTimes=3\nretryQueueNums=2\n",
    b"brokerPermission=6\n",
    b"brokerPermission=4\n",
    b"autoCreateSubscriptionGroup=false\n",
    b"autoCreateSubscriptionGroup=true\nenablePropertyFilter=true\n",
    b"transferBySendfileMinBytes=0\nbrokerFastFailureEnable=false\n",
    b"sendThreadPoolQueueCapacity=1\n",
    b"brokerPermission=abc\n",
    b"brokerPermission=-1\n",
    b"brokerPermission=99999999999999999999999\n",
    b"brokerPermission=2147483647\n",
    b"retryQueueNums=2147483647\n",
    b"retryQueueNums=-5\n",
    b"maxReconsumeTimes=-100\n",
    b"shortPollingTimeMills=-1\n",
    b"transferBySendfileMinBytes=-1\n",
    b"sendThreadPoolQueueCapacity=0\n",
    b"noSuchKey=1\n",
    b"brokerName=evil\n",
    b"flushDiskType=SYNC_FLUSH\nmaxMessageSize=1\n",
    b"storePathRootDir=/tmp/evil\n",
    b"brokerPermission=4\nbrokerName=evil\n",
    b"maxReconsumeTimes=5\nnoSuchKey=1\n",
    b"longPollingEnable=false\nretryQueueNums=x\n",
    b"=value\n",
    b"brokerPermission\n",
    b"brokerPermission=6=7\n",
    b"brokerPermission:6\n",
    b"brokerPermission =\t6 \r\n",
    b"maxReconsumeTimes=3\\\n7\n",
    b"brokerPermission=\x00\n",
    b"\xff\xfe\x00b\x00r\n",
    b"# only a comment\n! and another\n",
    b" \n\n\t\n",
    b"maxReconsumeTimes=" + b"9" * 5000 + b"\n",
    b"k" * 5000 + b"=1\n",
    b"maxReconsumeTimes=1\n" * 2000,
]
#: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP bodies (SubscriptionGroupConfig JSON)
GROUP_BODIES = [
    json.dumps({"groupName": "FuzzG", "consumeEnable": True, "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True}).encode(),
    b'{"groupName":"FuzzG2","consumeEnable":false,"retryQueueNums":0,"retryMaxTimes":-1}',
    b'{"groupName":"FuzzG","retryQueueNums":2147483647}',
    b'{"groupName":"FuzzG","retryQueueNums":1048576,"retryMaxTimes":2147483647}',
    b'{"groupName":"FuzzG","retryQueueNums":-3}',
    b'{"groupName":"FuzzG","retryQueueNums":"x","retryMaxTimes":1.5}',
    b'{"groupName":"FuzzG","retryQueueNums":1e99}',
    b'{"groupName":"FuzzG","retryQueueNums":99999999999999999999999}',
    b'{"groupName":"FuzzG","consumeEnable":"maybe"}',
    b'{"groupName":"FuzzG","consumeEnable":1,"brokerId":1180591620717411303424}',
    b'{"groupName":"FuzzG","whichBrokerWhenConsumeSlowly":[1],"brokerId":{}}',
    b'{"groupName":7}', b'{"groupName":null}', b'{"groupName":""}', b'{"consumeEnable":true}',
    b'{"groupName":"\\u00e9\\u2713"}', b'{"groupName":"' + b"x" * 300 + b'"}',
    b'{"groupName":"%RETRY%FuzzG"}', b'{"groupName":"CID_ONSAPI_OWNER","consumeEnable":false}',
    b'{"groupName":"FuzzG","extra":' + b"[" * 30 + b"]" * 30 + b"}",
    b'{"groupName":"FuzzG","groupSysFlag":0,"groupRetryPolicy":{"type":"CUSTOMIZED"}}',
    b'[{"groupName":"FuzzG"}]', b'"FuzzG"',
]  # fmt: skip
#: SQL92 subscriptions (pulls with expressionType SQL92, CHECK_CLIENT_CONFIG):
#: valid ones to mutate, and hostile ones (deep nesting, huge, garbage)
SQL_EXPRESSIONS = (
    "a > 5 AND region IN ('eu', 'us') OR b IS NULL",
    "TAGS = 'a' AND NOT (p BETWEEN 1 AND 9) AND s CONTAINS 'x'",
    "(" * 5000 + "a = 1" + ")" * 5000,
    "NOT " * 5000 + "a = 1",
    " OR ".join(f"a = '{i}'" for i in range(20_000)),
    "a IN (" + ",".join("'x'" for _ in range(30_000)) + ")",
    "a = 'unterminated",
    "a > 1e99999 AND b = 99999999999999999999999",
    "\x00\x01\x02 /* -- */ '",
)
#: bodies nested deeper than Python's recursion limit, for every JSON reader
DEEP_BODIES = (b"[" * 50_000, b'{"a":' * 20_000, b'{"consumerDataSet":' + b"[" * 50_000)


BODIES = [
    b"", b"{}", b"[]", b"null", b"7", b"\x00\x01garbage", b"x" * 5000,
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"FuzzT","subString":"a||b"}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":5}]}',
    b'{"consumerDataSet":7,"clientID":"c"}', b'{"clientID":"c","producerDataSet":[1,2]}',
    b'{"mqSet":5,"consumerGroup":"G","clientId":"c"}',
    b'{"mqSet":[{"topic":1}],"consumerGroup":"G","clientId":"c"}',
    b'{"mqSet":[{"topic":"FuzzT","brokerName":"b","queueId":0}],"consumerGroup":"G","clientId":"c"}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":"x"}}}}',
    b'{"clientId":"c","group":"G","subscriptionData":{"topic":"FuzzT","subString":"a > ",'
    b'"expressionType":"SQL92"}}',
    b'{"clientId":"c","group":"G","subscriptionData":7}',
    rmqcore.encode_batch([(b"m1", {"TAGS": "a"}, 0), (b"m2", b"", 0)]),
    *CONFIG_BODIES[::3], *GROUP_BODIES[::3], *DEEP_BODIES,
]  # fmt: skip


def _mq_set_body(group: str, topic: str) -> bytes:
    return json.dumps(
        {
            "consumerGroup": group,
            "clientId": "fuzz@1",
            "mqSet": [{"topic": topic, "brokerName": "broker-fuzz", "queueId": q} for q in (0, 1)],
        }
    ).encode()


def _register_body() -> bytes:
    return json.dumps(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {
                    "FuzzNs": {
                        "topicName": "FuzzNs",
                        "readQueueNums": 4,
                        "writeQueueNums": 4,
                        "perm": 6,
                    }
                },
                "dataVersion": {"timestamp": 1, "counter": 1},
            },
            "filterServerList": [],
        }
    ).encode()


def compressed_register_body(topics: dict[str, dict[str, Any]]) -> bytes:
    """Java's compressed RegisterBrokerBody: zlib of int32 len + DataVersion
    JSON, int32 topic count, per topic int32 len + TopicConfig JSON, int32
    len + filter server list JSON."""

    def chunk(obj: Any) -> bytes:
        raw = json.dumps(obj).encode()
        return struct.pack(">i", len(raw)) + raw

    out = chunk({"timestamp": 1, "counter": 1}) + struct.pack(">i", len(topics))
    out += b"".join(chunk(tc) for tc in topics.values()) + chunk([])
    return zlib.compress(out)


def broker_templates() -> list[Template]:
    """A valid request of every code the broker serves (mutation starts here)."""
    send = send_fields("FuzzT", 0, props(TAGS="a", KEYS="k1 k2", UNIQ_KEY="0A0B"))
    pull = {
        "consumerGroup": "FuzzG",
        "topic": "FuzzT",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "50",
        "subscription": "a || b",
        "subVersion": "0",
    }
    sql_pull = dict(pull, expressionType="SQL92", subscription=SQL_EXPRESSIONS[0])
    check = {"clientId": "fuzz@1", "group": "FuzzG",
             "subscriptionData": {"topic": "FuzzT", "subString": SQL_EXPRESSIONS[1],
                                  "expressionType": "SQL92"}}  # fmt: skip
    batch = rmqcore.encode_batch([(b"b1", {"TAGS": "a"}, 0), (b"b2", {"KEYS": "x"}, 0)])
    topic_q = {"topic": "FuzzT", "queueId": "0"}
    pop = {"consumerGroup": "FuzzG", "topic": "FuzzT", "queueId": "-1", "maxMsgNums": "8",
           "invisibleTime": "60000", "pollTime": "50", "bornTime": "0", "initMode": "0",
           "expType": "TAG", "exp": "a || b", "order": "false", "attemptId": "fuzz-a"}  # fmt: skip
    handle = {"consumerGroup": "FuzzG", "topic": "FuzzT", "extraInfo": POP_HANDLE}
    fwd = {"consumerGroup": "FuzzG", "clientId": "fuzz@1"}
    acl = {"accessKey": "fuzzAK", "secretKey": "fuzzSecret1", "whiteRemoteAddress": "127.0.0.1",
           "admin": "false", "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
           "topicPerms": "FuzzT=PUB|SUB", "groupPerms": "FuzzG=SUB"}  # fmt: skip
    end_tx = {"producerGroup": "FuzzPG", "tranStateTableOffset": "0", "commitLogOffset": "0",
              "commitOrRollback": "12", "fromTransactionCheck": "false", "msgId": MSG_ID,
              "transactionId": "fuzz-tx"}  # fmt: skip
    return [
        (RC.PULL_MESSAGE, sql_pull, b""),
        (RC.CHECK_CLIENT_CONFIG, {}, json.dumps(check).encode()),
        (RC.SEND_MESSAGE, send, b"fuzz-body"),
        (RC.SEND_MESSAGE_V2, v2(send), b"fuzz-body-v2"),
        (RC.SEND_BATCH_MESSAGE, v2(dict(send, batch="1", properties="")), batch),
        (RC.PULL_MESSAGE, pull, b""),
        (RC.QUERY_CONSUME_QUEUE, {"consumerGroup": "FuzzG", "index": "0", "count": "10",
                                  **topic_q}, b""),
        (RC.QUERY_MESSAGE, {"topic": "FuzzT", "key": "k1", "maxNum": "8",
                            "beginTimestamp": "0", "endTimestamp": str(2**62)}, b""),
        (RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "FuzzG", **topic_q}, b""),
        (RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "FuzzG", "commitOffset": "1", **topic_q},
         b""),
        (RC.UPDATE_AND_CREATE_TOPIC, {"topic": "FuzzT2", "readQueueNums": "2",
                                      "writeQueueNums": "2", "perm": "6",
                                      "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                                      "order": "false"}, b""),
        (RC.GET_ALL_TOPIC_CONFIG, {}, b""),
        (RC.DELETE_TOPIC_IN_BROKER, {"topic": "FuzzT2"}, b""),
        (RC.SEARCH_OFFSET_BY_TIMESTAMP, {"timestamp": "0", **topic_q}, b""),
        (RC.GET_MAX_OFFSET, topic_q, b""),
        (RC.GET_MIN_OFFSET, topic_q, b""),
        (RC.GET_EARLIEST_MSG_STORETIME, topic_q, b""),
        (RC.VIEW_MESSAGE_BY_ID, {"offset": "0"}, b""),
        (RC.GET_BROKER_RUNTIME_INFO, {}, b""),
        (RC.HEART_BEAT, {}, heartbeat_body("fuzz@1", "FuzzG", {"FuzzT": "a || b"},
                                           producer_group="FuzzPG")),
        (RC.UNREGISTER_CLIENT, {"clientID": "fuzz@1", "consumerGroup": "FuzzG",
                                "producerGroup": "FuzzPG"}, b""),
        # POP over remoting (a handle of this broker's form, never given)
        (RC.POP_MESSAGE, pop, b""),
        (RC.POP_MESSAGE, dict(pop, expType="SQL92", exp=SQL_EXPRESSIONS[0], queueId="0"), b""),
        (RC.ACK_MESSAGE, dict(handle, queueId="0", offset="0"), b""),
        (RC.CHANGE_MESSAGE_INVISIBLETIME, dict(handle, invisibleTime="60000"), b""),
        (RC.CONSUMER_SEND_MSG_BACK, {"group": "FuzzG", "originTopic": "FuzzT", "offset": "0",
                                     "delayLevel": "-1", "extraInfo": POP_HANDLE}, b""),
        (RC.GET_TOPIC_CONFIG, {"topic": "FuzzT"}, b""),
        (RC.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "FuzzG"}, b""),
        (RC.CONSUMER_SEND_MSG_BACK, {"group": "FuzzG", "offset": "0", "delayLevel": "1",
                                     "originMsgId": "", "originTopic": "FuzzT",
                                     "maxReconsumeTimes": "3"}, b""),
        (RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "FuzzG"}, b""),
        (RC.LOCK_BATCH_MQ, {}, _mq_set_body("FuzzG", "FuzzT")),
        (RC.UNLOCK_BATCH_MQ, {}, _mq_set_body("FuzzG", "FuzzT")),
        (RC.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "FuzzT", "group": "FuzzG",
                                            "timestamp": "0", "isForce": "true"}, b""),
        (RC.GET_ALL_CONSUMER_OFFSET, {}, b""),
        (RC.GET_ALL_DELAY_OFFSET, {}, b""),
        # transactions
        (RC.END_TRANSACTION, end_tx, b""),
        (RC.END_TRANSACTION, dict(end_tx, commitOrRollback="8", fromTransactionCheck="true"),
         b""),
        (RC.GET_PENDING_TRANSACTIONS, {"max": "10"}, b""),
        # subscription groups
        (RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, GROUP_BODIES[0]),
        (RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}, b""),
        (RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "FuzzG2", "removeOffset": "true"}, b""),
        # connections, consume progress, stats
        (RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "FuzzG"}, b""),
        (RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "FuzzPG"}, b""),
        (RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "FuzzT"}, b""),
        (RC.GET_CONSUME_STATS, {"consumerGroup": "FuzzG", "topic": "FuzzT"}, b""),
        (RC.QUERY_CONSUME_TIME_SPAN, {"topic": "FuzzT", "group": "FuzzG"}, b""),
        (RC.CLONE_GROUP_OFFSET, {"srcGroup": "FuzzG", "destGroup": "FuzzG2", "topic": "FuzzT",
                                 "offline": "true"}, b""),
        (RC.GET_CONSUMER_RUNNING_INFO, dict(fwd, jstackEnable="false"), b""),
        (RC.CONSUME_MESSAGE_DIRECTLY, dict(fwd, msgId=MSG_ID, topic="FuzzT"), b""),
        (RC.GET_TOPIC_STATS_INFO, {"topic": "FuzzT"}, b""),
        (RC.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "FuzzT"}, b""),
        (RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false", "isOnline": "true"}, b""),
        # the broker's settings
        (RC.GET_BROKER_CONFIG, {}, b""),
        (RC.UPDATE_BROKER_CONFIG, {}, b"longPollingEnable=true\nmaxReconsumeTimes=16\n"),
        # ACL administration (refused while ACL is off)
        (RC.UPDATE_AND_CREATE_ACL_CONFIG, acl, b""),
        (RC.DELETE_ACL_CONFIG, {"accessKey": "fuzzAK"}, b""),
        (RC.GET_BROKER_CLUSTER_ACL_INFO, {}, b""),
        (RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.0.0.*,127.0.0.1"}, b""),
        (RC.GET_BROKER_CLUSTER_ACL_CONFIG, {}, b""),
        # a controller telling a broker its role changed (one-way)
        (RC.NOTIFY_BROKER_ROLE_CHANGED, {"masterAddress": "127.0.0.1:1", "masterEpoch": "1",
                                         "syncStateSetEpoch": "1", "brokerId": "0"}, b""),
    ]  # fmt: skip


def namesrv_templates() -> list[Template]:
    """A valid request of every code the name server serves."""
    return [
        (RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "FuzzT"}, b""),
        (RC.GET_BROKER_CLUSTER_INFO, {}, b""),
        (RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, b""),
        (RC.QUERY_DATA_VERSION, {"brokerName": "fuzz-ns-b", "brokerAddr": "127.0.0.9:1",
                                 "clusterName": "FuzzC", "brokerId": "0"},
         json.dumps({"timestamp": 1, "counter": 1}).encode()),
        (RC.REGISTER_BROKER, {"brokerName": "fuzz-ns-b", "brokerAddr": "127.0.0.9:1",
                              "clusterName": "FuzzC", "brokerId": "0",
                              "haServerAddr": "127.0.0.9:2", "compressed": "false"},
         _register_body()),
        (RC.REGISTER_BROKER, {"brokerName": "fuzz-ns-c", "brokerAddr": "127.0.0.9:3",
                              "clusterName": "FuzzC", "brokerId": "0", "compressed": "true"},
         compressed_register_body({"FuzzZ": {"topicName": "FuzzZ", "readQueueNums": 2,
                                             "writeQueueNums": 2, "perm": 6}})),
        (RC.UNREGISTER_BROKER, {"brokerName": "fuzz-ns-b", "brokerAddr": "127.0.0.9:1",
                                "clusterName": "FuzzC", "brokerId": "0"}, b""),
        (RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "FuzzNs"}, b""),
        (RC.GET_TOPICS_BY_CLUSTER, {"cluster": "FuzzC"}, b""),
        (RC.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}, b""),
        (RC.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}, b""),
        (RC.PUT_KV_CONFIG, {"namespace": "FuzzNS", "key": "k", "value": "v"}, b""),
        (RC.GET_KV_CONFIG, {"namespace": "FuzzNS", "key": "k"}, b""),
        (RC.DELETE_KV_CONFIG, {"namespace": "FuzzNS", "key": "k"}, b""),
        (RC.GET_NAMESRV_CONFIG, {}, b""),
        (RC.UPDATE_NAMESRV_CONFIG, {}, b"scanNotActiveBrokerInterval=5000\n"),
        (RC.UPDATE_NAMESRV_CONFIG, {}, b"enableTopicList=true\nenableAllTopicList=true\n"),
        (RC.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "fuzz-ns-b"}, b""),
        (RC.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "fuzz-ns-b"}, b""),
    ]  # fmt: skip


def by_code(templates: list[Template]) -> dict[int, list[Template]]:
    out: dict[int, list[Template]] = defaultdict(list)
    for t in templates:
        out[t[0]].append(t)
    return dict(out)


def missing_templates(codes: list[int], templates: list[Template]) -> list[int]:
    """The served codes (UNKNOWN_CODE aside) no template is a request of."""
    have = {t[0] for t in templates}
    return [c for c in codes if c != UNKNOWN_CODE and c not in have]


# -- the broker's settings, before and after a fuzz run -----------------------------------


async def broker_config(client: RemotingClient, addr: str) -> dict[str, str]:
    """GET_BROKER_CONFIG, parsed."""
    r = await client.invoke(addr, RemotingCommand(RC.GET_BROKER_CONFIG, {}), 5.0)
    assert r.code == R.SUCCESS, r
    return parse_properties_text(r.body.decode())


async def restore_broker_config(
    client: RemotingClient, addr: str, before: dict[str, str]
) -> dict[str, str]:
    """Set back what a fuzz run changed of the broker's settings (the
    runtime keys, which UPDATE_BROKER_CONFIG may legitimately change: a
    read-only brokerPermission, autoCreateSubscriptionGroup off, ...) and
    check the settings are as before; {key: value during the run} of what
    was set back. Any other key changed is a failure (refused here)."""
    now = await broker_config(client, addr)
    changed = {k: now.get(k, "") for k, v in before.items() if now.get(k) != v}
    if changed:
        text = "".join(f"{k}={before[k]}\n" for k in changed)
        r = await client.invoke(
            addr, RemotingCommand(RC.UPDATE_BROKER_CONFIG, {}, text.encode()), 5.0
        )
        assert r.code == R.SUCCESS, (changed, r)
    after = await broker_config(client, addr)
    assert after == before, {k: (before.get(k), after.get(k)) for k in {*before, *after}
                             if before.get(k) != after.get(k)}  # fmt: skip
    return changed
