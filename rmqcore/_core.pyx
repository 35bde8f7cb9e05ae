# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""rmqcore._core: the single extension module of the pyrmq C core."""
from libc.stdint cimport int32_t, int64_t, uint8_t

from rmqcore.includes.commit_log cimport *
from rmqcore.includes.consume_queue cimport *
from rmqcore.includes.crc32 cimport *
from rmqcore.includes.deflate cimport *
from rmqcore.includes.deflate_worker cimport *
from rmqcore.includes.java_hash cimport *
from rmqcore.includes.lane_pool cimport *
from rmqcore.includes.mapped_file cimport *
from rmqcore.includes.mapped_file_queue cimport *
from rmqcore.includes.message_store cimport *
from rmqcore.includes.rmq_errors cimport *
from rmqcore.includes.remoting_header cimport *
from rmqcore.includes.sched_slice cimport *
from rmqcore.includes.thread_name cimport *
from rmqcore.includes.rmq_format cimport *
from rmqcore.includes.zerocopy cimport *

# Format constants, from csrc/rmq_format.h.
MESSAGE_MAGIC_CODE = RMQ_MESSAGE_MAGIC_CODE
MESSAGE_MAGIC_CODE_V2 = RMQ_MESSAGE_MAGIC_CODE_V2
BLANK_MAGIC_CODE = RMQ_BLANK_MAGIC_CODE
END_FILE_MIN_BLANK_LENGTH = RMQ_END_FILE_MIN_BLANK_LENGTH
RECORD_FIXED_IPV4 = RMQ_RECORD_FIXED_IPV4
CQ_STORE_UNIT_SIZE = RMQ_CQ_STORE_UNIT_SIZE
INDEX_HEADER_SIZE = RMQ_INDEX_HEADER_SIZE
INDEX_ENTRY_SIZE = RMQ_INDEX_ENTRY_SIZE
INDEX_HASH_SLOT_SIZE = RMQ_INDEX_HASH_SLOT_SIZE
DEFAULT_COMMIT_LOG_FILE_SIZE = RMQ_DEFAULT_COMMIT_LOG_FILE_SIZE
DEFAULT_CQ_UNITS_PER_FILE = RMQ_DEFAULT_CQ_UNITS_PER_FILE
DEFAULT_MAX_MESSAGE_SIZE = RMQ_DEFAULT_MAX_MESSAGE_SIZE
DEFAULT_INDEX_HASH_SLOT_NUM = RMQ_DEFAULT_INDEX_HASH_SLOT_NUM
DEFAULT_INDEX_NUM = RMQ_DEFAULT_INDEX_NUM
MAX_TOPIC_LENGTH = RMQ_MAX_TOPIC_LENGTH
MAX_PROPERTIES_LENGTH = RMQ_MAX_PROPERTIES_LENGTH
BATCH_ENTRY_FIXED = RMQ_BATCH_ENTRY_FIXED
SYSFLAG_COMPRESSED = RMQ_SYSFLAG_COMPRESSED
SYSFLAG_MULTI_TAGS = RMQ_SYSFLAG_MULTI_TAGS
SYSFLAG_TRANSACTION_PREPARED = RMQ_SYSFLAG_TRANSACTION_PREPARED
SYSFLAG_TRANSACTION_COMMIT = RMQ_SYSFLAG_TRANSACTION_COMMIT
SYSFLAG_TRANSACTION_ROLLBACK = RMQ_SYSFLAG_TRANSACTION_ROLLBACK
SYSFLAG_BORNHOST_V6 = RMQ_SYSFLAG_BORNHOST_V6
SYSFLAG_STOREHOST_V6 = RMQ_SYSFLAG_STOREHOST_V6
CHECKPOINT_FILE_SIZE = RMQ_CHECKPOINT_FILE_SIZE

include "_errors.pyx"
include "_records.pyx"
include "_store.pyx"
include "_remoting.pyx"
include "_pullpath.pyx"
include "_sendstate.pyx"
include "_sendpath.pyx"
include "_sendlanes.pyx"
include "_trace.pyx"
include "_batching.pyx"
include "_deflate.pyx"
include "_sched.pyx"
