package rocketstore.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Builder, scan and batch of one read: the projection Spark pushes down decides which
 *  columns the readers fill (a count: none); filters on topic, queue_id, tags and
 *  store_timestamp narrow what is read (Spark still applies every filter to the rows). */
final class StoreScan implements ScanBuilder, SupportsPushDownRequiredColumns,
        SupportsPushDownFilters, Scan, Batch {
    private final ReadOptions options;
    private StructType required = RocketStoreSource.SCHEMA;
    private Filter[] pushed = new Filter[0];

    StoreScan(ReadOptions options) {
        this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        required = requiredSchema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        pushed = Pushdown.apply(filters, options);
        return filters;         // all of them are evaluated again on the rows
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return required;
    }

    @Override
    public String description() {
        return "rocketstore-jvm " + options.path + " PushedFilters: " + java.util.Arrays.toString(pushed);
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        try {
            List<StorePartition> parts = StoreLayout.open(options).partitions(options);
            return parts.toArray(new InputPartition[0]);
        } catch (IOException e) {
            throw new UncheckedIOException("rocketstore-jvm: cannot plan the read of " + options.path, e);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Factory(options, required.fieldNames());
    }

    /** Runs on the executors: one columnar reader per partition. */
    static final class Factory implements PartitionReaderFactory {
        private final ReadOptions options;
        private final String[] columns;

        Factory(ReadOptions options, String[] columns) {
            this.options = options;
            this.columns = columns;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("rocketstore-jvm reads columnar batches only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new BatchReader((StorePartition) partition, options, columns);
        }
    }
}
