"""The Spark schemas of the integration: rows read from a topic, and the
per-row result of a send. Each is given once as a Spark DDL string and once
as the Arrow schema the readers and UDFs build batches with (the two are
checked against each other by tests/spark)."""

from __future__ import annotations

import pyarrow as pa

#: rows of spark.read / readStream .format("rocketmq")
READ_SCHEMA_DDL = (
    "topic string, brokerName string, queueId int, queueOffset bigint, msgId string, "
    "keys string, tags string, body binary, properties map<string,string>, "
    "bornTimestamp timestamp, storeTimestamp timestamp, bornHost string, reconsumeTimes int"
)

READ_ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("brokerName", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("msgId", pa.string()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("bornTimestamp", pa.timestamp("us", tz="UTC")),
        ("storeTimestamp", pa.timestamp("us", tz="UTC")),
        ("bornHost", pa.string()),
        ("reconsumeTimes", pa.int32()),
    ]
)

#: one result per row sent by the UDF producers
RESULT_SCHEMA_DDL = (
    "status string, msgId string, offsetMsgId string, brokerName string, queueId int, "
    "queueOffset bigint, error string"
)

RESULT_ARROW_TYPE = pa.struct(
    [
        ("status", pa.string()),
        ("msgId", pa.string()),
        ("offsetMsgId", pa.string()),
        ("brokerName", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("error", pa.string()),
    ]
)

#: columns a written row may have (others are ignored); body is required
WRITE_COLUMNS = ("body", "topic", "tags", "keys", "properties", "shardingKey")
