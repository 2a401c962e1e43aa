package rocketstore.spark;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one partition: walks the consume-queue units of its slices, parses and checks the
 * record each points at in the mapped commit log (as rocketstore.store._columns.decode_units:
 * a unit whose record is gone, damaged, of another size or not this queue's message is
 * skipped; a record failing its checks is also reported), and hands the rows that pass the
 * tags and store-time filters to a {@link Columns} filling only the columns asked for.
 */
final class BatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(BatchReader.class);
    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

    private final StorePartition part;
    private final ReadOptions options;
    private final Columns columns;
    private final String commitLogDir;
    private final Map<Long, ByteBuffer> logs = new HashMap<>();
    private final Set<Long> reported = new HashSet<>();
    private final Record rec = new Record();
    private final byte[][] tags;
    private final long[] tagCodes;
    private int slice = -1;
    private long next, end;
    private byte[] topicBytes;
    private ByteBuffer cq;                 // the consume-queue file holding unit `next`
    private long cqFirst = -1;             // its first unit's queue offset
    private File cqDir;
    private StorePartition.Slice cur;
    private boolean hashedTags;            // the slice's units carry tags hash codes
    private ByteBuffer log;                // the commit-log file of the last unit read
    private long logStart = -1;
    private ColumnarBatch batch;

    BatchReader(StorePartition part, ReadOptions options, String[] columnNames) {
        this.part = part;
        this.options = options;
        this.columns = new Columns(columnNames, options.batchRows);
        this.commitLogDir = new File(part.root, "commitlog").getPath();
        if (options.tags != null) {
            tags = new byte[options.tags.length][];
            tagCodes = new long[options.tags.length];
            for (int i = 0; i < tags.length; i++) {
                tags[i] = options.tags[i].getBytes(StandardCharsets.UTF_8);
                tagCodes[i] = options.tags[i].hashCode();
            }
        } else {
            tags = null;
            tagCodes = null;
        }
    }

    @Override
    public boolean next() throws IOException {
        columns.reset();
        int limit = columns.isEmpty() ? Integer.MAX_VALUE / 2 : options.batchRows;
        while (columns.rows() < limit) {
            if (next >= end && !nextSlice()) {
                break;
            }
            readUnit(next++);
        }
        if (columns.rows() == 0) {
            return false;
        }
        batch = columns.batch();
        return true;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        columns.close();
        logs.clear();
        log = null;
        cq = null;
    }

    private boolean nextSlice() {
        if (++slice >= part.slices.size()) {
            return false;
        }
        StorePartition.Slice s = part.slices.get(slice);
        cur = s;
        hashedTags = tagCodes != null && !SCHEDULE_TOPIC.equals(s.topic());
        next = s.start();
        end = s.end();
        topicBytes = s.topic().getBytes(StandardCharsets.UTF_8);
        cqDir = new File(new File(new File(part.root, "consumequeue"), s.topic()),
            Integer.toString(s.queueId()));
        cq = null;
        cqFirst = -1;
        columns.slice(topicBytes, s.queueId());
        return true;
    }

    private void readUnit(long offset) throws IOException {
        long perFile = part.consumeQueueFileSize / StoreLayout.UNIT;
        if (cq == null || offset < cqFirst || offset >= cqFirst + perFile) {
            cqFirst = offset / perFile * perFile;
            cq = map(new File(cqDir, String.format("%020d", cqFirst * StoreLayout.UNIT)));
        }
        int u = (int) ((offset - cqFirst) * StoreLayout.UNIT);
        if (cq == null || u + StoreLayout.UNIT > cq.capacity()) {
            return;
        }
        long phy = cq.getLong(u);
        int size = cq.getInt(u + 8);
        if (size <= 0) {
            return;
        }
        if (hashedTags && !hasCode(cq.getLong(u + 12))) {
            return;                         // the consume queue's tags code: no candidate
        }
        long fileStart = phy - Math.floorMod(phy, part.commitLogFileSize);
        if (fileStart != logStart) {
            log = logs.computeIfAbsent(fileStart, this::mapLog);
            logStart = fileStart;
        }
        int pos = (int) (phy - fileStart);
        if (log == null || phy < 0 || (long) pos + size > log.capacity()) {
            return;                         // gone (deleted) or not written
        }
        int rc = rec.parse(log, pos, size);
        if (rc <= 0) {
            return;
        }
        if (rec.phyOffset != phy) {
            report(phy, "its PHYSICALOFFSET field says " + rec.phyOffset);
            return;
        }
        int why = rec.check(part.recordCrcFrom >= 0 && part.recordCrcFrom <= phy);
        if (why != Record.OK) {
            report(phy, Record.REASONS[why]);
            return;
        }
        if (rc != size || rec.queueId != cur.queueId() || rec.queueOffset != offset
                || !sameBytes(log, rec.topic, rec.topicLen, topicBytes)) {
            return;                         // a damaged unit (or record): not this queue's
        }
        if (rec.storeTs < options.minTs || rec.storeTs > options.maxTs) {
            return;
        }
        if (tags != null && !tagMatches()) {
            return;                         // same hash code, another tag
        }
        columns.add(rec);
    }

    private boolean hasCode(long code) {
        for (long c : tagCodes) {
            if (c == code) {
                return true;
            }
        }
        return false;
    }

    private boolean tagMatches() {
        int[] v = Columns.findProp(rec.buf, rec.props, rec.propsLen, Columns.TAGS);
        if (v == null) {
            return false;
        }
        for (byte[] t : tags) {
            if (sameBytes(rec.buf, v[0], v[1], t)) {
                return true;
            }
        }
        return false;
    }

    static boolean sameBytes(ByteBuffer b, int at, int len, byte[] want) {
        if (len != want.length) {
            return false;
        }
        for (int i = 0; i < len; i++) {
            if (b.get(at + i) != want[i]) {
                return false;
            }
        }
        return true;
    }

    private void report(long offset, String reason) {
        if (reported.add(offset)) {
            LOG.warn("{}: commit-log record at offset {} skipped: {}", commitLogDir, offset, reason);
        }
    }

    private ByteBuffer mapLog(long fileStart) {
        try {
            return map(new File(commitLogDir, String.format("%020d", fileStart)));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The file mapped read-only; null when it does not exist. */
    static ByteBuffer map(File f) throws IOException {
        if (!f.isFile()) {
            return null;
        }
        try (FileChannel ch = FileChannel.open(f.toPath(), StandardOpenOption.READ)) {
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
        }
    }
}
