"""rmqcore: the C core of pyrmq (CommitLog, ConsumeQueue, IndexFile, flush,
sendfile), compiled from csrc/ and bound with Cython."""

from rmqcore._core import *  # noqa: F403
from rmqcore._core import (  # noqa: F401
    GET_MESSAGE_STATUS,
    AppendResult,
    Deflater,
    GetResult,
    MessageStoreCore,
    PubBuffer,
    SegmentPin,
    body_crc,
    decode_columns,
    decode_properties,
    decode_records,
    encode_batch,
    encode_message_batch,
    encode_properties,
    encode_pub,
    iter_cq_units,
    iter_records,
    java_hash,
    live_mapped_files,
    offset_msg_id,
    record_size,
    tag_code,
    validate_topic,
)
