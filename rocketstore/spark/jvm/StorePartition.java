package rocketstore.spark;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task's work: queue offset ranges [start, end) of one or more queues, in order. */
final class StorePartition implements InputPartition {
    /** Queue offsets [start, end) of one queue, with the files' layout the planner found. */
    record Slice(String topic, int queueId, long start, long end) implements Serializable { }

    final String root;
    final long commitLogFileSize;
    final long consumeQueueFileSize;
    final long recordCrcFrom;
    final List<Slice> slices;

    StorePartition(String root, long commitLogFileSize, long consumeQueueFileSize,
                   long recordCrcFrom, List<Slice> slices) {
        this.root = root;
        this.commitLogFileSize = commitLogFileSize;
        this.consumeQueueFileSize = consumeQueueFileSize;
        this.recordCrcFrom = recordCrcFrom;
        this.slices = slices;
    }
}
