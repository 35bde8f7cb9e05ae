"""Typed surface of rmqcore._core (checked against the module by a test)."""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from mmap import mmap
from typing import Any

MESSAGE_MAGIC_CODE: int
MESSAGE_MAGIC_CODE_V2: int
BLANK_MAGIC_CODE: int
END_FILE_MIN_BLANK_LENGTH: int
RECORD_FIXED_IPV4: int
CQ_STORE_UNIT_SIZE: int
INDEX_HEADER_SIZE: int
INDEX_ENTRY_SIZE: int
INDEX_HASH_SLOT_SIZE: int
DEFAULT_COMMIT_LOG_FILE_SIZE: int
DEFAULT_CQ_UNITS_PER_FILE: int
DEFAULT_MAX_MESSAGE_SIZE: int
DEFAULT_INDEX_HASH_SLOT_NUM: int
DEFAULT_INDEX_NUM: int
MAX_TOPIC_LENGTH: int
MAX_PROPERTIES_LENGTH: int
BATCH_ENTRY_FIXED: int
SYSFLAG_COMPRESSED: int
SYSFLAG_MULTI_TAGS: int
SYSFLAG_TRANSACTION_PREPARED: int
SYSFLAG_TRANSACTION_COMMIT: int
SYSFLAG_TRANSACTION_ROLLBACK: int
SYSFLAG_BORNHOST_V6: int
SYSFLAG_STOREHOST_V6: int
CHECKPOINT_FILE_SIZE: int
GET_MESSAGE_STATUS: tuple[str, ...]

def java_hash(s: str | bytes) -> int: ...
def tag_code(tag: str | bytes | None) -> int: ...
def body_crc(body: bytes | bytearray | memoryview) -> int: ...
def encode_properties(props: Mapping[str, object] | None) -> bytes: ...
def decode_properties(data: bytes | str) -> dict[str, str]: ...
def encode_batch(
    messages: Iterable[tuple[bytes, bytes | Mapping[str, object], int]],
) -> bytes: ...
def encode_message_batch(
    msgs: list[Any],
    topic: str,
    id_head: str,
    seq: int,
    max_size: int,
    message_cls: type,
) -> tuple[bytes, str]: ...
def decode_records(
    data: bytes | bytearray | memoryview,
    check_crc: bool = ...,
    corrupt: list[tuple[int, dict[str, Any]]] | None = ...,
) -> list[dict[str, Any]]: ...
def decode_columns(
    data: bytes | bytearray | memoryview, include_properties: bool = ..., check_crc: bool = ...
) -> dict[str, Any]: ...
def iter_records(
    data: bytes | bytearray | memoryview | mmap,
    start: int = ...,
    check_crc: bool = ...,
    corrupt: list[tuple[int, dict[str, Any]]] | None = ...,
) -> Iterator[tuple[int, dict[str, Any]]]: ...
def iter_cq_units(
    data: bytes | bytearray | memoryview | mmap, first_index: int = ...
) -> Iterator[tuple[int, int, int, int]]: ...
def record_size(
    body_len: int,
    topic_len: int,
    props_len: int,
    born_host_len: int = ...,
    store_host_len: int = ...,
) -> int: ...
def record_with_topic(
    record: bytes | bytearray | memoryview,
    topic: str | bytes,
    queue_id: int,
    extra_properties: bytes | str = ...,
) -> bytes: ...
def validate_topic(topic: str | bytes) -> None: ...
def live_mapped_files() -> int: ...
def offset_msg_id(store_host: bytes, phys_offset: int) -> str: ...

class AppendResult:
    phys_offset: int
    queue_offset: int
    wrote_bytes: int
    count: int
    rolled: bool
    needs_allocate: bool
    store_timestamp: int
    store_host: bytes
    @property
    def next_phys_offset(self) -> int: ...
    @property
    def msg_id(self) -> str: ...

class GetResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    total_bytes: int
    ranges: list[tuple[int, int]]
    tags_codes: list[int]
    @property
    def message_count(self) -> int: ...

class SegmentPin:
    start_offset: int
    end_offset: int
    @property
    def fd(self) -> int: ...
    def sendfile(self, sock_fd: int, phys_offset: int, count: int) -> int: ...
    def read(self, phys_offset: int, count: int) -> bytes: ...
    def release(self) -> None: ...
    def __enter__(self) -> SegmentPin: ...
    def __exit__(self, *exc: object) -> None: ...

class MessageStoreCore:
    store_host: bytes
    recovery: dict[str, Any]
    root: str
    def __init__(
        self,
        root: str,
        *,
        commit_log_file_size: int = ...,
        cq_units_per_file: int = ...,
        max_message_size: int = ...,
        max_queue_nums: int = ...,
        index_hash_slot_num: int = ...,
        index_num: int = ...,
        index_enable: bool = ...,
        warm_mapped_files: bool = ...,
        index_async: bool = ...,
        store_host: bytes | None = ...,
    ) -> None: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def put(
        self,
        topic: str | bytes,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        properties: bytes | str = ...,
        *,
        flag: int = ...,
        sysflag: int = ...,
        born_timestamp: int = ...,
        born_host: bytes | None = ...,
        reconsume_times: int = ...,
        prepared_tx_offset: int = ...,
    ) -> AppendResult: ...
    def put_batch(
        self,
        topic: str | bytes,
        queue_id: int,
        batch: bytes | bytearray | memoryview,
        *,
        sysflag: int = ...,
        born_timestamp: int = ...,
        born_host: bytes | None = ...,
        reconsume_times: int = ...,
    ) -> AppendResult: ...
    def get_message(
        self,
        topic: str | bytes,
        queue_id: int,
        offset: int,
        max_msgs: int = ...,
        max_bytes: int = ...,
        tags_codes: Iterable[int] | None = ...,
        max_phys: int = ...,
    ) -> GetResult: ...
    def read(self, phys_offset: int, size: int) -> bytes: ...
    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> bytes: ...
    def look_message_by_offset(self, phys_offset: int) -> dict[str, Any]: ...
    def properties_at(self, phys_offset: int) -> dict[str, str]: ...
    def offset_msg_ids(self, store_host: bytes, phys_offset: int, length: int) -> str: ...
    def pin(self, phys_offset: int) -> SegmentPin: ...
    def min_offset_in_queue(self, topic: str | bytes, queue_id: int) -> int: ...
    def max_offset_in_queue(self, topic: str | bytes, queue_id: int) -> int: ...
    def offset_in_queue_by_time(
        self, topic: str | bytes, queue_id: int, timestamp_ms: int
    ) -> int: ...
    def query_message_offsets(
        self,
        topic: str | bytes,
        key: str | bytes,
        max_num: int = ...,
        begin_ts: int = ...,
        end_ts: int = ...,
    ) -> list[int]: ...
    def append_replica(
        self, offset: int, data: bytes | bytearray | memoryview
    ) -> tuple[int, bool]: ...
    def truncate(self, offset: int) -> None: ...
    def dispatch(self) -> int: ...
    def build_index(self, max_records: int = ...) -> int: ...
    def start_index_thread(self, window_ms: int = ...) -> None: ...
    def stop_index_thread(self) -> None: ...
    @property
    def index_error(self) -> str | None: ...
    @property
    def index_lag(self) -> int: ...
    @property
    def index_dispatched(self) -> int: ...
    def find_key_offsets(
        self, topic: str | bytes, key: str | bytes, begin_ts: int = ...
    ) -> list[int]: ...
    @property
    def dispatch_error(self) -> str | None: ...
    @property
    def commit_log_min_offset(self) -> int: ...
    @property
    def commit_log_max_offset(self) -> int: ...
    @property
    def flushed_offset(self) -> int: ...
    @property
    def dispatched_offset(self) -> int: ...
    @property
    def commit_log_file_size(self) -> int: ...
    def commit_log_files(self) -> list[int]: ...
    def flush_commit_log(self, least_pages: int = ...) -> int: ...
    def flush_logics(self, least_pages: int = ...) -> None: ...
    def prepare_next_segment(self) -> None: ...
    @property
    def has_prepared_segment(self) -> bool: ...
    def delete_expired_commit_log(
        self, expire_ms: int, now_ms: int, force: bool = ..., max_files: int = ...
    ) -> int: ...
    def delete_expired_logics(self) -> int: ...
    def delete_topic(self, topic: str | bytes) -> int: ...

# Remoting hot path (csrc/remoting_header.c; frame spec in pyrmq/remoting/command.py)
def decode_json_header(
    data: bytes | bytearray | memoryview,
) -> tuple[int, str | None, int, int, int, str | None, dict[str, str]]: ...
def split_frames(
    buf: bytes | bytearray | memoryview, max_frame: int
) -> tuple[list[tuple[int, Any, bytes]], int]: ...
def whole_frames_end(buf: bytes | bytearray | memoryview, max_frame: int) -> int: ...
def encode_json_header(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, Any],
) -> bytes: ...
def encode_json_frame(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, Any],
    body: bytes | bytearray | memoryview,
) -> bytes: ...
def pull_answer(
    core: MessageStoreCore,
    topic: str | bytes,
    queue_id: int,
    offset: int,
    max_msgs: int,
    max_bytes: int,
    tags_codes: list[int] | None,
    max_phys: int,
    opaque: int,
    version: int,
    body_max: int,
    slow_below: int = -1,
) -> tuple[bytes | None, GetResult]: ...
def send_request_fields(
    producer_group: str,
    topic: str,
    default_topic: str,
    default_topic_queue_nums: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str,
    batch: bool,
    broker_name: str,
) -> dict[str, str]: ...

# The broker's common send in C (rmqcore/_sendpath.pyx)
class SendChunk:
    handled: int
    handled_v2: int
    needs_allocate: bool
    end_offset: int
    stats: list[tuple[str, int, int, int]]
    touched: list[tuple[str, int, int]]
    answers: bytes
    frames: list[tuple[int, Any, bytes]]
    used: int
    split_again: bool
    error: str | None
    token: Any

class SendLanes:
    """A SendPath's C send threads (SendPath.start_lanes)."""

    def close(self) -> list[SendChunk]: ...

class SendPath:
    want_touched: bool
    def __init__(
        self, core: MessageStoreCore, max_message_size: int, oneway_ok: bool = ...
    ) -> None: ...
    def learn(self, topic: str, queue_nums: int) -> None: ...
    def forget_all(self) -> None: ...
    def split(
        self, buf: bytes | bytearray | memoryview, max_frame: int, born_host: bytes
    ) -> SendChunk: ...
    def start_lanes(self, threads: int) -> None: ...
    @property
    def lanes_fd(self) -> int: ...
    @property
    def lanes_pending(self) -> int: ...
    def submit(self, data: bytes, max_frame: int, born_host: bytes, token: Any) -> bool: ...
    def collect(self) -> list[SendChunk]: ...
    def close_lanes(self) -> list[SendChunk]: ...

# -- trace records (rmqcore/_trace.pyx) --
def encode_pub(
    timestamp: int,
    region_id: str | None,
    group: str | None,
    topic: str | None,
    msg_id: str | None,
    tags: str | None,
    keys: str | None,
    store_host: str | None,
    body_length: int,
    cost_ms: int,
    msg_type: int,
    offset_msg_id: str | None,
    success: bool,
) -> str: ...

class Deflater:
    """compress(body) -> body as a zlib stream, from one deflate state kept
    for the deflater's life (set up at the first body); one thread at a
    time."""

    level: int
    mem_level: int
    def __init__(self, level: int, mem_level: int = 8) -> None: ...
    def compress(self, body: bytes | bytearray | memoryview) -> bytes: ...

class DeflateWorker:
    """Compresses bodies into zlib streams on a C thread of its own that
    never takes the GIL: submit queues, done gives back what is compressed
    so far, in the order submitted."""

    level: int
    max_pending: int
    pending: int
    def __init__(self, level: int, max_pending: int = 64) -> None: ...
    def submit(self, body: bytes, token: Any = None) -> bool: ...
    def done(self) -> list[tuple[bytes | None, bytes, Any]]: ...
    def close(self) -> list[tuple[bytes | None, bytes, Any]]: ...

class TraceBuffer:
    dropped: int
    last_error: Exception | None
    def __init__(
        self,
        group: str,
        send_ok: object,
        default_region: str,
        max_records: int,
        batch_records: int = 0,
        on_batch: Callable[[], object] | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def append(self, msg: Any, r: Any, store_host: str, began: int, cost: int) -> None: ...
    def append_encoded(self, data: str, keys: list[str]) -> None: ...
    def take(
        self, max_body: int, max_records: int = 0, max_keys: int = 0, whole: bool = False
    ) -> list[tuple[bytes, str]]: ...

class SlotsBuilder:
    def __init__(self, cls: type, names: Iterable[str]) -> None: ...
    def __call__(self, *values: Any) -> Any: ...

class SendBatch:
    msgs: list[Any]
    outs: list[Any]
    counted_total: int
    opened: float
    timeout: float
    retries: int
    size: int
    handle: Any
    def __init__(self, opened: float, timeout: float, retries: int) -> None: ...
    def __len__(self) -> int: ...
    def add(
        self,
        msg: Any,
        out: Any,
        callback: Callable[[Any, BaseException | None], object] | None,
        counted: bool,
        size: int,
        timeout: float | None,
        retries: int,
    ) -> int: ...
    def entry(
        self, i: int
    ) -> tuple[Any, Any, Callable[[Any, BaseException | None], object] | None, bool]: ...
    def settle(
        self,
        make: SlotsBuilder,
        status: object,
        uniq_ids: str,
        offset_ids: str,
        mq: object,
        first: int,
        tx: str | None,
        region: str | None,
        tracer: Any,
        addr: str,
        born: int,
        cost: int,
        log: Any,
    ) -> None: ...
    def fail(self, error: BaseException, log: Any) -> None: ...

class SendAccumulatorCore:
    _p: Any
    _open: dict[Any, SendBatch]
    _busy: dict[Any, int]
    _topics: dict[str, bool]
    max_bytes: int
    max_delay: float
    max_count: int
    batches: int
    batched: int
    singles: int
    def __init__(
        self,
        producer: Any,
        message_cls: type,
        max_bytes: int,
        max_delay: float,
        max_count: int,
        entry_fixed: int,
        uniq_key: str,
        uniq_bytes: int,
        single_only: Iterable[str],
        single_only_prefixes: tuple[str, ...],
        wait_key: str,
    ) -> None: ...
    def offer(
        self,
        msg: Any,
        mq: Any,
        selector: Any,
        arg: Any,
        timeout: float | None,
        retries: int,
        callback: Callable[[Any, BaseException | None], object] | None,
        counted: bool,
    ) -> Any: ...

# The calling thread's time slice (csrc/sched_slice.h)
SCHED_SLICE_MIN_US: int
SCHED_SLICE_MAX_US: int

def sched_slice(slice_us: int) -> int: ...

# The calling thread's name (csrc/thread_name.h)
THREAD_NAME_MAX: int

def name_thread(name: str) -> None: ...
