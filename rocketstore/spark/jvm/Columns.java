package rocketstore.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The columns of one batch: only those the query asked for are filled, each straight from
 * the mapped record (a count fills none; a query without body never copies one). Values
 * are those of rocketstore.store._columns / rocketstore.spark.arrow.
 */
final class Columns {
    static final byte[] TAGS = "TAGS".getBytes(StandardCharsets.US_ASCII);
    static final byte[] KEYS = "KEYS".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);

    private final String[] names;
    private final int[] kinds;             // index of each asked column in SCHEMA
    private final OnHeapColumnVector[] vectors;
    private final ColumnarBatch batch;
    private int rows;
    private byte[] topic;
    private int queueId;
    private byte[] scratch = new byte[1 << 12];
    private final byte[] text = new byte[96];
    private int[] segs = new int[64];      // property pairs: key pos, key len, value pos, value len

    Columns(String[] names, int capacity) {
        this.names = names;
        StructField[] fields = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            fields[i] = RocketStoreSource.SCHEMA.apply(names[i]);
        }
        vectors = OnHeapColumnVector.allocateColumns(capacity, new StructType(fields));
        kinds = new int[names.length];
        for (int i = 0; i < names.length; i++) {
            kinds[i] = RocketStoreSource.SCHEMA.fieldIndex(names[i]);
        }
        batch = new ColumnarBatch(vectors);
    }

    boolean isEmpty() {
        return names.length == 0;
    }

    int rows() {
        return rows;
    }

    void slice(byte[] topicBytes, int queue) {
        topic = topicBytes;
        queueId = queue;
    }

    void reset() {
        rows = 0;
        for (WritableColumnVector v : vectors) {
            v.reset();
        }
    }

    ColumnarBatch batch() {
        batch.setNumRows(rows);
        return batch;
    }

    void close() {
        batch.close();
    }

    void add(Record r) {
        int row = rows++;
        for (int c = 0; c < names.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (kinds[c]) {         // SCHEMA's order
                case 0 -> v.putByteArray(row, topic, 0, topic.length);
                case 1 -> v.putInt(row, queueId);
                case 2 -> v.putLong(row, r.queueOffset);
                case 3 -> v.putLong(row, r.phyOffset);
                case 4 -> v.putByteArray(row, text, 0, msgId(r));
                case 5 -> putProp(v, row, r, TAGS);
                case 6 -> putKeys(v, row, r);
                case 7 -> putProps(v, row, r);
                case 8 -> putBody(v, row, r);
                case 9 -> v.putLong(row, r.bornTs * 1000);
                case 10 -> v.putLong(row, r.storeTs * 1000);
                case 11 -> v.putByteArray(row, text, 0, host(r.buf, r.bornHost, r.bornHostLen));
                case 12 -> v.putByteArray(row, text, 0, host(r.buf, r.storeHost, r.storeHostLen));
                case 13 -> v.putInt(row, r.reconsumeTimes);
                case 14 -> v.putInt(row, r.sysFlag);
                default -> throw new IllegalStateException("no column " + names[c]);
            }
        }
    }

    private byte[] bytes(ByteBuffer b, int at, int len) {
        if (scratch.length < len) {
            scratch = new byte[Math.max(len, scratch.length * 2)];
        }
        b.get(at, scratch, 0, len);
        return scratch;
    }

    private void putBody(WritableColumnVector v, int row, Record r) {
        byte[] raw = bytes(r.buf, r.body, r.bodyLen);
        if ((r.sysFlag & Record.SYSFLAG_COMPRESSED) == 0) {
            v.putByteArray(row, raw, 0, r.bodyLen);
            return;
        }
        int kind = r.sysFlag & 0x700;
        if (kind != 0 && kind != 0x300) {
            throw new UnsupportedOperationException("rocketstore-jvm: the body at commit-log offset "
                + r.phyOffset + " is " + (kind == 0x100 ? "LZ4" : kind == 0x200 ? "ZSTD" : "0x"
                + Integer.toHexString(kind)) + "-compressed; only zlib is supported here");
        }
        Inflater inf = new Inflater();
        try {
            inf.setInput(raw, 0, r.bodyLen);
            byte[] out = new byte[Math.max(64, r.bodyLen * 4)];
            int n = 0;
            while (!inf.finished()) {
                if (n == out.length) {
                    out = java.util.Arrays.copyOf(out, out.length * 2);
                }
                int k = inf.inflate(out, n, out.length - n);
                if (k == 0 && (inf.needsInput() || inf.needsDictionary())) {
                    throw new DataFormatException("truncated zlib stream");
                }
                n += k;
            }
            v.putByteArray(row, out, 0, n);
        } catch (DataFormatException e) {
            throw new IllegalStateException("rocketstore-jvm: the compressed body at commit-log offset "
                + r.phyOffset + " does not inflate: " + e.getMessage(), e);
        } finally {
            inf.end();
        }
    }

    private void putProp(WritableColumnVector v, int row, Record r, byte[] name) {
        int[] at = findProp(r.buf, r.props, r.propsLen, name);
        if (at == null) {
            v.putNull(row);
        } else {
            v.putByteArray(row, bytes(r.buf, at[0], at[1]), 0, at[1]);
        }
    }

    /** KEYS split on spaces, empty pieces dropped; no KEYS: an empty list. */
    private void putKeys(WritableColumnVector v, int row, Record r) {
        WritableColumnVector items = v.arrayData();
        int first = items.getElementsAppended();
        int[] at = findProp(r.buf, r.props, r.propsLen, KEYS);
        if (at != null) {
            int start = 0;
            for (int i = 0; i <= at[1]; i++) {
                if (i == at[1] || r.buf.get(at[0] + i) == ' ') {
                    if (i > start) {
                        items.appendByteArray(bytes(r.buf, at[0] + start, i - start), 0, i - start);
                    }
                    start = i + 1;
                }
            }
        }
        v.putArray(row, first, items.getElementsAppended() - first);
    }

    /** Every name\x01value\x02 pair with both sides non-empty; a later duplicate wins. */
    private void putProps(WritableColumnVector v, int row, Record r) {
        WritableColumnVector keys = (WritableColumnVector) v.getChild(0);
        WritableColumnVector vals = (WritableColumnVector) v.getChild(1);
        int first = keys.getElementsAppended();
        int n = pairs(r.buf, r.props, r.propsLen);
        for (int i = 0; i < n; i++) {
            boolean later = false;
            for (int j = i + 1; j < n && !later; j++) {
                later = segs[4 * j + 1] == segs[4 * i + 1]
                    && r.buf.slice(segs[4 * j], segs[4 * j + 1]).equals(r.buf.slice(segs[4 * i], segs[4 * i + 1]));
            }
            if (!later) {
                keys.appendByteArray(bytes(r.buf, segs[4 * i], segs[4 * i + 1]), 0, segs[4 * i + 1]);
                vals.appendByteArray(bytes(r.buf, segs[4 * i + 2], segs[4 * i + 3]), 0, segs[4 * i + 3]);
            }
        }
        v.putArray(row, first, keys.getElementsAppended() - first);
    }

    private int pairs(ByteBuffer b, int props, int len) {
        int n = 0;
        int p = props;
        int end = props + len;
        while (p < end) {
            int seg = p;
            while (seg < end && b.get(seg) != 2) {
                seg++;
            }
            int sep = p;
            while (sep < seg && b.get(sep) != 1) {
                sep++;
            }
            if (sep < seg && sep > p && sep + 1 < seg) {
                if (segs.length < 4 * (n + 1)) {
                    segs = java.util.Arrays.copyOf(segs, segs.length * 2);
                }
                segs[4 * n] = p;
                segs[4 * n + 1] = sep - p;
                segs[4 * n + 2] = sep + 1;
                segs[4 * n + 3] = seg - sep - 1;
                n++;
            }
            p = seg + 1;
        }
        return n;
    }

    /** {position, length} of the last value of property {@code name}, or null. */
    static int[] findProp(ByteBuffer b, int props, int len, byte[] name) {
        int[] found = null;
        int p = props;
        int end = props + len;
        while (p < end) {
            int seg = p;
            while (seg < end && b.get(seg) != 2) {
                seg++;
            }
            int sep = p + name.length;
            if (sep + 1 < seg && b.get(sep) == 1 && BatchReader.sameBytes(b, p, name.length, name)) {
                found = new int[] {sep + 1, seg - sep - 1};
            }
            p = seg + 1;
        }
        return found;
    }

    /** Offset message id: the store host's bytes and the commit-log offset, uppercase hex. */
    private int msgId(Record r) {
        int k = 0;
        for (int i = 0; i < r.storeHostLen; i++) {
            int x = r.buf.get(r.storeHost + i) & 0xFF;
            text[k++] = HEX[x >> 4];
            text[k++] = HEX[x & 15];
        }
        long off = r.phyOffset;
        for (int i = 15; i >= 0; i--) {
            text[k + i] = HEX[(int) (off & 15)];
            off >>>= 4;
        }
        return k + 16;
    }

    /** "a.b.c.d:port", or "[v6]:port" in inet_ntop's compressed form. */
    private int host(ByteBuffer b, int at, int len) {
        StringBuilder s = new StringBuilder(48);
        if (len == 8) {
            for (int i = 0; i < 4; i++) {
                s.append(b.get(at + i) & 0xFF).append(i < 3 ? "." : "");
            }
        } else {
            s.append('[').append(ipv6(b, at)).append(']');
        }
        s.append(':').append(b.getInt(at + len - 4) & 0xFFFFFFFFL);
        byte[] t = s.toString().getBytes(StandardCharsets.US_ASCII);
        System.arraycopy(t, 0, text, 0, t.length);
        return t.length;
    }

    private static String ipv6(ByteBuffer b, int at) {
        int[] g = new int[8];
        for (int i = 0; i < 8; i++) {
            g[i] = b.getShort(at + 2 * i) & 0xFFFF;
        }
        int bestAt = -1, bestLen = 1;
        for (int i = 0; i < 8; ) {
            int j = i;
            while (j < 8 && g[j] == 0) {
                j++;
            }
            if (j - i > bestLen) {
                bestAt = i;
                bestLen = j - i;
            }
            i = j == i ? i + 1 : j;
        }
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            if (i == bestAt) {
                s.append(i == 0 ? "::" : ":");
                i += bestLen - 1;
                continue;
            }
            s.append(Integer.toHexString(g[i])).append(i < 7 ? ":" : "");
        }
        return s.toString();
    }
}
