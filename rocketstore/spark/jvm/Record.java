package rocketstore.spark;

import java.nio.ByteBuffer;
import java.util.zip.CRC32;

/**
 * One commit-log record parsed in place in a mapped file (docs/format.md §1), and checked as
 * the Python source checks it (rocketstore.store._codec: size fields, physical offset, the
 * body CRC or the record CRC property). Positions are absolute indices into {@code buf}.
 */
final class Record {
    static final int MAGIC_V1 = 0xDAA320A7;
    static final int MAGIC_V2 = 0xDAA320AB;
    static final int BLANK_MAGIC = 0xCBD43194;
    static final int MIN_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2;
    static final int SYSFLAG_COMPRESSED = 0x1;
    static final int SYSFLAG_BORNHOST_V6 = 0x10;
    static final int SYSFLAG_STOREHOST_V6 = 0x20;
    static final int CRC_PROP_LEN = 20;            // "__CRC32#" \x01 ten digits \x02
    private static final byte[] CRC_PROP_HEAD = "__CRC32#\u0001".getBytes();

    /** Outcomes of {@link #check}: OK, or why the record must not be handed out. */
    static final int OK = 0, BAD_BODY_CRC = 1, BAD_RECORD_CRC = 2, BAD_CRC_PROP = 3,
        BAD_PROPS = 4, NO_CRC_PROP = 5;
    static final String[] REASONS = {"", "body CRC mismatch", "record CRC (__CRC32#) mismatch",
        "damaged record CRC property (__CRC32#)", "NUL bytes in the properties",
        "no record CRC property (__CRC32#), which the store appended to every record from its "
        + "offset on (config/recordCrc.json)"};

    ByteBuffer buf;
    int start, total, queueId, sysFlag, reconsumeTimes, bodyCrc;
    long queueOffset, phyOffset, bornTs, storeTs;
    int bornHost, bornHostLen, storeHost, storeHostLen;
    int body, bodyLen, topic, topicLen, props, propsLen;
    private final CRC32 crc = new CRC32();
    private ByteBuffer crcView;
    private ByteBuffer crcSource;

    /** Parse the record at {@code p} with {@code avail} bytes readable: its size; 0 for a
     *  blank (end of file); -1 malformed; -2 parsed but TOTALSIZE disagrees. */
    int parse(ByteBuffer b, int p, int avail) {
        buf = b;
        start = p;
        if (avail < 8) {
            return -1;
        }
        total = b.getInt(p);
        int magic = b.getInt(p + 4);
        if (magic == BLANK_MAGIC) {
            return total < 8 || total > avail ? -1 : 0;
        }
        if (magic != MAGIC_V1 && magic != MAGIC_V2) {
            return -1;
        }
        if (total < MIN_SIZE || total > avail) {
            return -1;
        }
        bodyCrc = b.getInt(p + 8);
        queueId = b.getInt(p + 12);
        queueOffset = b.getLong(p + 20);
        phyOffset = b.getLong(p + 28);
        sysFlag = b.getInt(p + 36);
        bornTs = b.getLong(p + 40);
        bornHost = p + 48;
        bornHostLen = (sysFlag & SYSFLAG_BORNHOST_V6) != 0 ? 20 : 8;
        int q = 48 + bornHostLen;
        storeTs = b.getLong(p + q);
        storeHost = p + q + 8;
        storeHostLen = (sysFlag & SYSFLAG_STOREHOST_V6) != 0 ? 20 : 8;
        q += 8 + storeHostLen;
        if (q + 16 > total) {
            return -1;
        }
        reconsumeTimes = b.getInt(p + q);
        bodyLen = b.getInt(p + q + 12);
        q += 16;
        if (bodyLen < 0 || (long) q + bodyLen + 1 > total) {
            return -1;
        }
        body = p + q;
        q += bodyLen;
        if (magic == MAGIC_V2) {
            if (q + 2 > total) {
                return -1;
            }
            topicLen = b.getShort(p + q) & 0xFFFF;
            q += 2;
        } else {
            topicLen = b.get(p + q) & 0xFF;
            q += 1;
        }
        if (q + topicLen + 2 > total) {
            return -1;
        }
        topic = p + q;
        q += topicLen;
        propsLen = b.getShort(p + q) & 0xFFFF;
        q += 2;
        props = p + q;
        q += propsLen;
        return q == total ? total : -2;
    }

    /** OK or a reason code; {@code needCrc}: written where the store appends the record CRC. */
    int check(boolean needCrc) {
        for (int i = 0; i < propsLen; i++) {
            if (buf.get(props + i) == 0) {
                return BAD_PROPS;       // a zeroed page or sector, not text
            }
        }
        int state = crcPropState();
        if (state < 0) {
            return BAD_CRC_PROP;
        }
        if (state == 0) {
            if (needCrc) {
                return NO_CRC_PROP;
            }
            return crcOf(body, bodyLen) == bodyCrc ? OK : BAD_BODY_CRC;
        }
        int d = props + propsLen - CRC_PROP_LEN + CRC_PROP_HEAD.length;
        long want = 0;
        for (int i = 9; i >= 0; i--) {          // stored least significant digit first
            want = want * 10 + (buf.get(d + i) - '0');
        }
        return crcOf(start, total - CRC_PROP_LEN) == want ? OK : BAD_RECORD_CRC;
    }

    private int crcOf(int from, int len) {
        if (crcSource != buf) {             // one reusable view per mapped file
            crcView = buf.duplicate();
            crcSource = buf;
        }
        crcView.limit(crcView.capacity()).position(from).limit(from + len);
        crc.reset();
        crc.update(crcView);
        return (int) (crc.getValue() & 0x7FFFFFFFL);
    }

    /** 1: the properties end with a well-formed record CRC property; 0: they do not; -1: one
     *  or two bytes off that shape (a damaged CRC property). */
    private int crcPropState() {
        if (propsLen < CRC_PROP_LEN) {
            return 0;
        }
        int t = props + propsLen - CRC_PROP_LEN;
        int bad = 0;
        for (int i = 0; i < CRC_PROP_HEAD.length; i++) {
            if (buf.get(t + i) != CRC_PROP_HEAD[i]) {
                bad++;
            }
        }
        for (int i = CRC_PROP_HEAD.length; i < CRC_PROP_LEN - 1; i++) {
            byte c = buf.get(t + i);
            if (c < '0' || c > '9') {
                bad++;
            }
        }
        if (buf.get(t + CRC_PROP_LEN - 1) != 2) {
            bad++;
        }
        if (propsLen > CRC_PROP_LEN && buf.get(t - 1) != 2) {
            bad++;
        }
        return bad == 0 ? 1 : bad <= 2 ? -1 : 0;
    }
}
