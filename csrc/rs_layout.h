/*
 * rs_layout.h -- every on-disk offset, size and magic code of a RocketMQ store.
 *
 * The one source for writer and reader (leveldb's log_format.h). Field layout of a
 * commit-log record is docs/format.md §1.1; all integers are big-endian. Offsets
 * named *_POS are for the common case (IPv4 born host, IPv4 store host); the codec
 * adds RS_HOST_V6_EXTRA for each IPv6 host before the field.
 */
#ifndef RS_LAYOUT_H
#define RS_LAYOUT_H

/* ---- magic codes (docs/format.md §1.1, 1.6) ---- */
#define RS_MAGIC_V1             0xDAA320A7u   /* -626843481: 1-byte topic length */
#define RS_MAGIC_V2             0xDAA320ABu   /* -626843477: 2-byte topic length (5.1+) */
#define RS_BLANK_MAGIC          0xCBD43194u   /* -875286124: end-of-file filler */
#define RS_END_FILE_MIN_BLANK   8             /* int maxBlank + int BLANK_MAGIC */

/* ---- commit-log record fields (IPv4 hosts) ---- */
#define RS_TOTALSIZE_POS        0
#define RS_MAGIC_POS            4
#define RS_BODYCRC_POS          8
#define RS_QUEUEID_POS          12
#define RS_FLAG_POS             16
#define RS_QUEUEOFFSET_POS      20
#define RS_PHYOFFSET_POS        28
#define RS_SYSFLAG_POS          36
#define RS_BORNTIMESTAMP_POS    40
#define RS_BORNHOST_POS         48
#define RS_HOST_V4_LEN          8             /* 4-byte address + 4-byte port */
#define RS_HOST_V6_LEN          20            /* 16-byte address + 4-byte port */
#define RS_HOST_V6_EXTRA        12
/* after the born host: store timestamp 8, store host 8|20, reconsume 4, prepared tx 8 */
#define RS_STORETIMESTAMP_LEN   8
#define RS_RECONSUME_LEN        4
#define RS_PREPARED_TX_LEN      8
#define RS_BODYLEN_LEN          4
#define RS_TOPICLEN_V1_LEN      1
#define RS_TOPICLEN_V2_LEN      2
#define RS_PROPLEN_LEN          2
/* fixed part with IPv4 hosts and the v1 topic length: TOTALSIZE = 91 + body + topic + props */
#define RS_RECORD_FIXED_V1      91

/* ---- sysflag bits (docs/format.md §1.3) ---- */
#define RS_SYSFLAG_COMPRESSED       0x1
#define RS_SYSFLAG_MULTI_TAGS       0x2
#define RS_SYSFLAG_TX_MASK          0xC
#define RS_SYSFLAG_TX_NOT           0x0
#define RS_SYSFLAG_TX_PREPARED      0x4
#define RS_SYSFLAG_TX_COMMIT        0x8
#define RS_SYSFLAG_TX_ROLLBACK      0xC
#define RS_SYSFLAG_BORNHOST_V6      0x10
#define RS_SYSFLAG_STOREHOST_V6     0x20
#define RS_SYSFLAG_NEED_UNWRAP      0x40
#define RS_SYSFLAG_INNER_BATCH      0x80
#define RS_SYSFLAG_COMPRESS_TYPE    0x700
#define RS_SYSFLAG_COMPRESS_LZ4     0x100
#define RS_SYSFLAG_COMPRESS_ZSTD    0x200
#define RS_SYSFLAG_COMPRESS_ZLIB    0x300

/* ---- limits (docs/format.md §1.5, 1.7) ---- */
#define RS_MAX_TOPIC_LEN_V1     127
#define RS_MAX_TOPIC_LEN        255
#define RS_MAX_PROPERTIES_LEN   32767
#define RS_MAX_RECORD_SLACK     65536         /* record limit = maxMessageSize + 64 KiB */

/* ---- properties (docs/format.md §1.4) ---- */
#define RS_NAME_VALUE_SEPARATOR 1
#define RS_PROPERTY_SEPARATOR   2
/* 5.x record CRC (enabledAppendPropCRC): the last property, "__CRC32#" \x01 10 digits \x02,
 * over record bytes [0, TOTALSIZE - 20) (CommitLog.CRC32_RESERVED_LEN) */
#define RS_CRC32_RESERVED_LEN   20
#define RS_CRC32_NAME_LEN       8             /* "__CRC32#" */

/* ---- message ids (docs/format.md §7) ---- */
#define RS_MSGID_V4_BYTES       16            /* addr 4 + port 4 + offset 8 -> 32 hex */
#define RS_MSGID_V6_BYTES       28            /* addr 16 + port 4 + offset 8 -> 56 hex */
#define RS_UNIQ_ID_BYTES        16            /* client id: ip 4, pid 2, hash 4, time 4, seq 2 */

/* ---- mapped files (docs/format.md §4) ---- */
#define RS_OS_PAGE_SIZE         4096
#define RS_FILE_NAME_DIGITS     20

/* ---- consume queue (docs/format.md §5) ---- */
#define RS_CQ_UNIT_SIZE         20            /* phy offset 8 | size 4 | tags code 8 */
#define RS_CQ_PHYOFFSET_POS     0
#define RS_CQ_SIZE_POS          8
#define RS_CQ_TAGS_POS          12
#define RS_CQ_FILLER_SIZE       0x7FFFFFFF

/* ---- index file (docs/format.md §6) ---- */
#define RS_INDEX_HEADER_SIZE    40
#define RS_INDEX_SLOT_SIZE      4
#define RS_INDEX_ENTRY_SIZE     20

/* ---- checkpoint (docs/format.md §8) ---- */
#define RS_CHECKPOINT_SIZE      4096

#endif /* RS_LAYOUT_H */
