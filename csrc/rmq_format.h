/* rmq_format.h: THE on-disk specification of the pyrmq store.
 *
 * Every layout the C core reads or writes is defined here, once. Numbers are
 * big-endian unless a block says otherwise. All of it is byte-compatible with
 * Apache RocketMQ 4.x (store module) except where a block says "pyrmq".
 *
 * ------------------------------------------------------------------------
 * 1. Segment file naming (CommitLog and ConsumeQueue)
 * ------------------------------------------------------------------------
 * A segment file is named by the logical offset of its first byte, zero-padded
 * to 20 decimal digits ("00000000000000000000", "00000000001073741824").
 * Segments of one queue all have the same size; offset o lives in the file
 * named (o / size) * size at position o % size. Files are pre-sized with
 * fallocate (never by writing zeros in large blocks: a page cache filled with
 * 1 MiB writes makes every later msync write back 1 MiB, measured 3x slower).
 *
 * Store directory:
 *   <root>/commitlog/<20 digits>              CommitLog segments
 *   <root>/consumequeue/<topic>/<qid>/<20 d>  ConsumeQueue segments
 *   <root>/index/<yyyyMMddHHmmssSSS>          IndexFiles
 *   <root>/checkpoint                         StoreCheckpoint (section 5)
 *   <root>/abort                              present while a store is open; holds the
 *                                             machine's boot_id (Linux), so that recovery
 *                                             tells a dead process from a machine that went
 *                                             down (RocketMQ: an empty marker)
 *   <root>/lock                               flock()ed by the owning process
 */
#ifndef RMQ_FORMAT_H
#define RMQ_FORMAT_H

#include <stdint.h>

#define RMQ_SEGMENT_NAME_DIGITS 20

/* Defaults, as RocketMQ's MessageStoreConfig. */
#define RMQ_DEFAULT_COMMIT_LOG_FILE_SIZE (1024LL * 1024 * 1024)
#define RMQ_DEFAULT_CQ_UNITS_PER_FILE 300000
#define RMQ_DEFAULT_MAX_MESSAGE_SIZE (4 * 1024 * 1024)
#define RMQ_OS_PAGE_SIZE 4096

/* ------------------------------------------------------------------------
 * 2. CommitLog record ("MessageExt" as stored and as sent in a pull body)
 * ------------------------------------------------------------------------
 *   off  size  field
 *     0     4  TOTALSIZE        whole record, this field included
 *     4     4  MAGICCODE        RMQ_MESSAGE_MAGIC_CODE (or _V2, see below)
 *     8     4  BODYCRC          crc32(body) & 0x7FFFFFFF (Java's UtilAll.crc32)
 *    12     4  QUEUEID
 *    16     4  FLAG             user flag
 *    20     8  QUEUEOFFSET      index of the record in its ConsumeQueue
 *    28     8  PHYSICALOFFSET   CommitLog offset of this record
 *    36     4  SYSFLAG          bits below
 *    40     8  BORNTIMESTAMP    ms since epoch
 *    48  8/20  BORNHOST         IPv4 (4) + port int32; IPv6 (16) + port if SYSFLAG & 0x10
 *     .     8  STORETIMESTAMP   ms since epoch, assigned by append
 *     .  8/20  STOREHOST        as BORNHOST; IPv6 if SYSFLAG & 0x20
 *     .     4  RECONSUMETIMES
 *     .     8  PREPAREDTRANSACTIONOFFSET
 *     .     4  BODYLENGTH       then BODY (zlib-compressed if SYSFLAG & 0x1)
 *     .   1/2  TOPICLENGTH      signed int8 for MAGIC_CODE, int16 for MAGIC_CODE_V2
 *     .     n  TOPIC
 *     .     2  PROPERTIESLENGTH signed int16, then PROPERTIES (section 3)
 * The fixed part is 91 bytes with two IPv4 hosts (RMQ_RECORD_FIXED_IPV4).
 * Invariants: records are back to back with no padding (a pull body is a byte
 * range of the log); a record never spans two segments; PHYSICALOFFSET equals
 * the record's position; QUEUEOFFSET is dense per (topic, queue id).
 * Why these widths: a pull response carries this exact layout to clients
 * (the C++ client parses it field by field). Never change. pyrmq writes
 * MAGIC_CODE (v1) records and reads both magic versions.
 *
 * End-of-file blank record: when a record does not fit in the rest of a
 * segment (it needs its size + RMQ_END_FILE_MIN_BLANK_LENGTH bytes), the rest
 * of the segment gets TOTALSIZE = bytes left, MAGICCODE = RMQ_BLANK_MAGIC_CODE
 * and the record goes to the next segment. Readers skip to the next segment.
 *
 * Damaged-range filler (pyrmq recovery): bytes of the durable part of the log
 * that fail their checks, with intact records after them, are overwritten so
 * that every reader passes over them and none serves them: up to the segment
 * end, with an end-of-file blank record; inside a segment, with one record of
 * exactly the damaged length whose SYSFLAG is a rolled-back transaction (so no
 * ConsumeQueue unit or index key is ever made for it, here or in RocketMQ),
 * TOPIC a prefix of RMQ_DAMAGED_TOPIC (as much as fits; a damaged range is at
 * least one record, so at least 1 character), QUEUEID and QUEUEOFFSET 0, zero
 * hosts and born time, and a zero body with its CRC. ConsumeQueue units that
 * pointed into the range no longer match a record header there; pulls skip
 * them.
 */
#define RMQ_DAMAGED_TOPIC "%DAMAGED%"
#define RMQ_MESSAGE_MAGIC_CODE ((int32_t)0xDAA320A7)    /* -626843481 */
#define RMQ_MESSAGE_MAGIC_CODE_V2 ((int32_t)0xDAA320AB) /* -626843477, 5.x */
#define RMQ_BLANK_MAGIC_CODE ((int32_t)0xCBD43194)      /* -875286124 */
#define RMQ_END_FILE_MIN_BLANK_LENGTH 8
#define RMQ_RECORD_FIXED_IPV4 91

#define RMQ_REC_OFF_TOTALSIZE 0
#define RMQ_REC_OFF_MAGICCODE 4
#define RMQ_REC_OFF_BODYCRC 8
#define RMQ_REC_OFF_QUEUEID 12
#define RMQ_REC_OFF_FLAG 16
#define RMQ_REC_OFF_QUEUEOFFSET 20
#define RMQ_REC_OFF_PHYSICALOFFSET 28
#define RMQ_REC_OFF_SYSFLAG 36
#define RMQ_REC_OFF_BORNTIMESTAMP 40
#define RMQ_REC_OFF_BORNHOST 48

/* SYSFLAG bits (MessageSysFlag). */
#define RMQ_SYSFLAG_COMPRESSED 0x1
#define RMQ_SYSFLAG_MULTI_TAGS 0x2
#define RMQ_SYSFLAG_TRANSACTION_MASK 0xC
#define RMQ_SYSFLAG_TRANSACTION_PREPARED 0x4
#define RMQ_SYSFLAG_TRANSACTION_COMMIT 0x8
#define RMQ_SYSFLAG_TRANSACTION_ROLLBACK 0xC
#define RMQ_SYSFLAG_BORNHOST_V6 0x10
#define RMQ_SYSFLAG_STOREHOST_V6 0x20

/* Maximum sizes implied by the widths above. */
#define RMQ_MAX_TOPIC_LENGTH 127
#define RMQ_MAX_PROPERTIES_LENGTH 32767

/* ------------------------------------------------------------------------
 * 3. Properties string
 * ------------------------------------------------------------------------
 * name 0x01 value 0x02, repeated; writers leave a trailing 0x02. Readers
 * split on 0x02 and drop items without exactly one 0x01. Keys the store
 * reads: TAGS (its hash goes in the ConsumeQueue), KEYS (space-separated,
 * indexed), UNIQ_KEY (indexed).
 */
#define RMQ_NAME_VALUE_SEPARATOR 1
#define RMQ_PROPERTY_SEPARATOR 2

/* ------------------------------------------------------------------------
 * 4. Batch body (request body of a batch send, section 7.4 of the protocol)
 * ------------------------------------------------------------------------
 *   off  size  field
 *     0     4  TOTALSIZE   20 + BODYLEN + 2 + PROPSLEN
 *     4     4  MAGICCODE   0 (ignored)
 *     8     4  BODYCRC     0 (ignored; the store computes it)
 *    12     4  FLAG
 *    16     4  BODYLEN     then BODY
 *     .     2  PROPSLEN    then PROPS
 * Entries back to back, no topic or queue: those come from the request.
 */
#define RMQ_BATCH_ENTRY_FIXED 22

/* ------------------------------------------------------------------------
 * 5. ConsumeQueue unit
 * ------------------------------------------------------------------------
 *   off  size  field
 *     0     8  commit_log_offset  PHYSICALOFFSET of the record
 *     8     4  size               TOTALSIZE of the record
 *    12     8  tags_code          Java String.hashCode(TAGS) as int32, widened;
 *                                 0 when there is no tag
 * Invariants: unit n of a queue is at logical byte n*20 of the queue's
 * segment sequence; a unit whose size is 0 (and offset 0) was never written;
 * units of one queue have strictly increasing commit_log_offset.
 * Why 20: byte-compatible with RocketMQ. Never change.
 */
#define RMQ_CQ_STORE_UNIT_SIZE 20

/* ------------------------------------------------------------------------
 * 6. IndexFile
 * ------------------------------------------------------------------------
 * Header, 40 bytes:
 *   off  size  field
 *     0     8  begin_timestamp   store time of the first indexed record (ms)
 *     8     8  end_timestamp     store time of the last indexed record (ms)
 *    16     8  begin_phy_offset  CommitLog offset of the first indexed record
 *    24     8  end_phy_offset    CommitLog offset of the last indexed record
 *    32     4  hash_slot_count   slots in use (informational)
 *    36     4  index_count       next entry number; starts at 1
 * Then hash_slot_num slots of 4 bytes: the number of the newest entry whose
 * key hash maps to the slot (hash % hash_slot_num), 0 = empty.
 * Then index_num entries of 20 bytes:
 *     0     4  key_hash          abs(Java hashCode(topic + "#" + key)), 0 if negative
 *     4     8  phy_offset        CommitLog offset of the record
 *    12     4  time_diff         (store time - begin_timestamp) / 1000, seconds
 *    16     4  prev_index        previous entry in the slot's chain, 0 = end
 * Entry 0 is never used so that 0 can mean "empty". A file is full when
 * index_count reaches index_num; the next record opens a new file.
 * File size = 40 + hash_slot_num*4 + index_num*20. RocketMQ's defaults are
 * 5,000,000 slots and 20,000,000 entries (420 MB). Byte-compatible with
 * RocketMQ's IndexFile; lookups re-check the key against the record, since
 * distinct keys share hashes.
 */
#define RMQ_INDEX_HEADER_SIZE 40
#define RMQ_INDEX_HASH_SLOT_SIZE 4
#define RMQ_INDEX_ENTRY_SIZE 20
#define RMQ_DEFAULT_INDEX_HASH_SLOT_NUM 5000000
#define RMQ_DEFAULT_INDEX_NUM 20000000
#define RMQ_INDEX_KEY_SEPARATOR '#'

/* ------------------------------------------------------------------------
 * 7. StoreCheckpoint ("checkpoint"), one 4096-byte file
 * ------------------------------------------------------------------------
 *   off  size  field
 *     0     8  physic_msg_timestamp   store time of the last flushed record
 *     8     8  logics_msg_timestamp   store time of the last flushed CQ unit
 *    16     8  index_msg_timestamp    store time of the last flushed index entry: the
 *                                     newest IndexFile's end_timestamp at the IndexFiles'
 *                                     last flush (the thorough pass and close only)
 *    24     8  master_flushed_offset  0 (RocketMQ HA; unused)
 *    32     8  confirm_phy_offset     pyrmq: CommitLog offset known durable
 *    40     8  dispatched_offset      pyrmq: CommitLog offset below which every
 *                                     ConsumeQueue unit is durable (index entries:
 *                                     index_msg_timestamp)
 *    48     4  magic                  pyrmq: RMQ_CHECKPOINT_MAGIC
 *    52     4  crc                    pyrmq: crc32 of bytes 0..51 & 0x7FFFFFFF
 * Fields 0..31 are RocketMQ's layout. Written with one pwrite + fdatasync of
 * the whole page. A bad magic or CRC means "no checkpoint": recovery then
 * scans from the first segment instead of trusting it.
 */
#define RMQ_CHECKPOINT_FILE_SIZE 4096
#define RMQ_CHECKPOINT_MAGIC ((int32_t)0x50594B31) /* "PYK1" */
#define RMQ_CHECKPOINT_PAYLOAD 52

#endif /* RMQ_FORMAT_H */
