package rocketstore.spark;

import java.io.Serializable;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The read options the JVM reader takes, parsed and checked (names as the Python source's). */
final class ReadOptions implements Serializable {
    static final int MAX_TAGS = 8;
    private static final Set<String> KNOWN = Set.of("path", "paths", "topics", "queueids",
        "startoffset", "endoffset", "starttimestamp", "endtimestamp", "tags", "numpartitions",
        "maxrowsperpartition", "batchrows", "commitlogfilesize", "consumequeuefilesize");

    String path;
    Set<String> topics;          // null: all
    Set<Integer> queueIds;       // null: all
    long startOffset = Long.MIN_VALUE;
    long endOffset = Long.MAX_VALUE;
    long minTs = Long.MIN_VALUE;
    long maxTs = Long.MAX_VALUE;
    String[] tags;               // null: all
    int numPartitions;           // 0: the driver's cores
    long maxRowsPerPartition = 1L << 20;
    int batchRows = 1 << 12;
    long commitLogFileSize;      // 0: the store's own
    long consumeQueueFileSize;

    static ReadOptions parse(CaseInsensitiveStringMap o) {
        ReadOptions r = new ReadOptions();
        for (String k : o.keySet()) {
            if (!KNOWN.contains(k.toLowerCase(Locale.ROOT))) {
                throw new IllegalArgumentException("option " + k + " is not one the rocketstore-jvm "
                    + "reader knows (the Python source, format(\"rocketstore\"), may take it)");
            }
        }
        r.path = o.get("path");
        if (r.path == null || r.path.isEmpty()) {
            throw new IllegalArgumentException("option path: no store directory given (load(dir))");
        }
        r.topics = strings(o, "topics", false);
        Set<String> q = strings(o, "queueIds", false);
        if (q != null) {
            r.queueIds = new TreeSet<>();
            for (String s : q) {
                r.queueIds.add((int) number(s, "queueIds", Integer.MIN_VALUE));
            }
        }
        r.startOffset = offset(o, "startOffset", Long.MIN_VALUE);
        r.endOffset = offset(o, "endOffset", Long.MAX_VALUE);
        r.minTs = integer(o, "startTimestamp", Long.MIN_VALUE, Long.MIN_VALUE);
        r.maxTs = integer(o, "endTimestamp", Long.MAX_VALUE, Long.MIN_VALUE);
        Set<String> t = strings(o, "tags", true);
        if (t != null) {
            if (t.size() > MAX_TAGS) {
                throw new IllegalArgumentException("option tags: " + o.get("tags") + ": at most "
                    + MAX_TAGS + " tags");
            }
            r.tags = t.toArray(new String[0]);
        }
        r.numPartitions = (int) integer(o, "numPartitions", 0, 1);
        r.maxRowsPerPartition = integer(o, "maxRowsPerPartition", 1L << 20, 1);
        r.batchRows = (int) Math.min(1 << 16, integer(o, "batchRows", 1 << 12, 1));
        r.commitLogFileSize = integer(o, "commitLogFileSize", 0, 1024);
        r.consumeQueueFileSize = integer(o, "consumeQueueFileSize", 0, 20);
        return r;
    }

    private static Set<String> strings(CaseInsensitiveStringMap o, String name, boolean tags) {
        String v = o.get(name);
        if (v == null) {
            return null;
        }
        String s = tags ? v.replace("||", ",") : v;
        Set<String> out = new TreeSet<>();
        for (String x : s.split(",")) {
            if (!x.strip().isEmpty()) {
                out.add(x.strip());
            }
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException("option " + name + ": " + v + ": names no value");
        }
        return out;
    }

    private static long offset(CaseInsensitiveStringMap o, String name, long dflt) {
        String v = o.get(name);
        if (v != null && v.strip().startsWith("{")) {
            throw new IllegalArgumentException("option " + name + ": per-queue offsets (JSON) are "
                + "not supported by the rocketstore-jvm reader: give one offset, or use "
                + "format(\"rocketstore\")");
        }
        return integer(o, name, dflt, Long.MIN_VALUE);
    }

    private static long integer(CaseInsensitiveStringMap o, String name, long dflt, long min) {
        String v = o.get(name);
        if (v == null || v.strip().isEmpty()) {
            return dflt;
        }
        return number(v, name, min);
    }

    private static long number(String v, String name, long min) {
        long n;
        try {
            n = Long.parseLong(v.strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("option " + name + ": " + v + ": expected an integer");
        }
        if (n < min) {
            throw new IllegalArgumentException("option " + name + ": " + v + ": must be at least " + min);
        }
        return n;
    }
}
