package rocketstore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A store directory as the driver plans a read of it: the file sizes, the queues, each
 * queue's offset range, cut into partitions as the Python source cuts them
 * (rocketstore.spark.scan.plan_partitions). Nothing is written and no lock taken.
 */
final class StoreLayout {
    static final long DEFAULT_COMMIT_LOG_FILE_SIZE = 1L << 30;
    static final long DEFAULT_CQ_FILE_SIZE = 300_000L * 20;
    static final int UNIT = 20;

    final String root;
    final long commitLogFileSize;
    final long cqFileSize;
    final long recordCrcFrom;

    private StoreLayout(String root, long commitLogFileSize, long cqFileSize, long recordCrcFrom) {
        this.root = root;
        this.commitLogFileSize = commitLogFileSize;
        this.cqFileSize = cqFileSize;
        this.recordCrcFrom = recordCrcFrom;
    }

    static StoreLayout open(ReadOptions o) throws IOException {
        File root = new File(o.path);
        File[] logs = sortedFiles(new File(root, "commitlog"));
        if (logs == null) {
            throw new IOException("not a store directory (no commitlog/): " + o.path);
        }
        long cl = o.commitLogFileSize > 0 ? o.commitLogFileSize
            : logs.length > 0 ? logs[0].length() : DEFAULT_COMMIT_LOG_FILE_SIZE;
        long cq = o.consumeQueueFileSize > 0 ? o.consumeQueueFileSize : detectCqFileSize(root);
        return new StoreLayout(o.path, cl, cq, recordCrcFrom(root));
    }

    /** Files of a directory named by their 20-digit start offset, in order; null: no directory. */
    static File[] sortedFiles(File dir) {
        File[] fs = dir.listFiles(f -> f.isFile() && f.getName().matches("\\d{20}"));
        if (fs != null) {
            Arrays.sort(fs, (a, b) -> a.getName().compareTo(b.getName()));
        }
        return fs;
    }

    private static long detectCqFileSize(File root) {
        File[] topics = new File(root, "consumequeue").listFiles(File::isDirectory);
        if (topics != null) {
            for (File t : topics) {
                File[] qs = t.listFiles(File::isDirectory);
                for (File q : qs == null ? new File[0] : qs) {
                    File[] fs = sortedFiles(q);
                    if (fs != null && fs.length > 0 && fs[0].length() % UNIT == 0) {
                        return fs[0].length();
                    }
                }
            }
        }
        return DEFAULT_CQ_FILE_SIZE;
    }

    /** config/recordCrc.json's recordCrcFrom: records from there on must carry the record CRC. */
    private static long recordCrcFrom(File root) {
        File f = new File(root, "config/recordCrc.json");
        try {
            String s = Files.readString(f.toPath(), StandardCharsets.UTF_8);
            Matcher m = Pattern.compile("\"recordCrcFrom\"\\s*:\\s*(-?\\d+)").matcher(s);
            return m.find() ? Long.parseLong(m.group(1)) : -1;
        } catch (IOException | NumberFormatException e) {
            return -1;          // absent or unreadable: the CRC is checked where present only
        }
    }

    /** Queue offsets [min, max) a consume queue holds: from its first file's start to the
     *  first empty unit of its last non-empty file. */
    static long[] queueBounds(File dir, long cqFileSize) throws IOException {
        File[] fs = sortedFiles(dir);
        if (fs == null || fs.length == 0) {
            return new long[] {0, 0};
        }
        long min = Long.parseLong(fs[0].getName()) / UNIT;
        for (int k = fs.length - 1; k >= 0; k--) {
            long start = Long.parseLong(fs[k].getName()) / UNIT;
            try (FileChannel ch = FileChannel.open(fs[k].toPath(), StandardOpenOption.READ)) {
                long len = Math.min(ch.size(), cqFileSize);
                if (len < UNIT) {
                    continue;
                }
                ByteBuffer b = ch.map(FileChannel.MapMode.READ_ONLY, 0, len);
                int n = (int) (len / UNIT);
                int i = 0;
                while (i < n && b.getInt(i * UNIT + 8) != 0) {
                    i++;
                }
                if (i > 0) {
                    return new long[] {min, Math.max(min, start + i)};
                }
            }
        }
        return new long[] {min, min};
    }

    /** The read's partitions: the selected queues' ranges end to end, cut every
     *  min(ceil(rows / target), maxRowsPerPartition) rows. */
    List<StorePartition> partitions(ReadOptions o) throws IOException {
        List<StorePartition.Slice> ranges = new ArrayList<>();
        long total = 0;
        File cqRoot = new File(root, "consumequeue");
        String[] topics = cqRoot.list();
        if (topics != null) {
            Arrays.sort(topics);
            for (String topic : topics) {
                if (o.topics != null && !o.topics.contains(topic)) {
                    continue;
                }
                File tdir = new File(cqRoot, topic);
                String[] qs = tdir.list((d, n) -> n.matches("\\d+") && new File(d, n).isDirectory());
                if (qs == null) {
                    continue;
                }
                int[] ids = Arrays.stream(qs).mapToInt(Integer::parseInt).sorted().toArray();
                for (int q : ids) {
                    if (o.queueIds != null && !o.queueIds.contains(q)) {
                        continue;
                    }
                    long[] b = queueBounds(new File(tdir, Integer.toString(q)), cqFileSize);
                    long lo = Math.max(b[0], o.startOffset);
                    long hi = Math.min(b[1], o.endOffset);
                    if (lo < hi) {
                        ranges.add(new StorePartition.Slice(topic, q, lo, hi));
                        total += hi - lo;
                    }
                }
            }
        }
        int target = o.numPartitions > 0 ? o.numPartitions : Runtime.getRuntime().availableProcessors();
        long cap = Math.max(1, Math.min(o.maxRowsPerPartition, (total + target - 1) / target));
        List<StorePartition> parts = new ArrayList<>();
        List<StorePartition.Slice> cur = new ArrayList<>();
        long room = cap;
        for (StorePartition.Slice r : ranges) {
            long lo = r.start();
            while (lo < r.end()) {
                long take = Math.min(r.end() - lo, room);
                cur.add(new StorePartition.Slice(r.topic(), r.queueId(), lo, lo + take));
                lo += take;
                room -= take;
                if (room == 0) {
                    parts.add(partition(cur));
                    cur = new ArrayList<>();
                    room = cap;
                }
            }
        }
        if (!cur.isEmpty()) {
            parts.add(partition(cur));
        }
        return parts;
    }

    private StorePartition partition(List<StorePartition.Slice> slices) {
        return new StorePartition(root, commitLogFileSize, cqFileSize, recordCrcFrom, slices);
    }
}
