package rocketstore.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM batch reader of a rocketstore (RocketMQ) store directory:
 * {@code spark.read.format("rocketstore-jvm").load(dir)}. Same schema, rows and read options
 * as the Python source's batch read; streaming, writes and the wire stay on the Python source.
 */
public final class RocketStoreSource implements TableProvider, DataSourceRegister {
    /** Same columns as rocketstore.spark.arrow.SCHEMA_DDL. */
    public static final StructType SCHEMA = StructType.fromDDL(
        "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, msg_id string, "
        + "tags string, keys array<string>, properties map<string,string>, body binary, "
        + "born_timestamp timestamp, store_timestamp timestamp, born_host string, store_host string, "
        + "reconsume_times int, sys_flag int");

    @Override
    public String shortName() {
        return "rocketstore-jvm";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StoreTable(new CaseInsensitiveStringMap(properties));
    }

    /** A store directory as a readable table. */
    static final class StoreTable implements Table, SupportsRead {
        private final CaseInsensitiveStringMap options;

        StoreTable(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override
        public String name() {
            return "rocketstore";
        }

        @Override
        public StructType schema() {
            return SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap readOptions) {
            // options of the table (load's) and of the read are the same map in a batch read
            java.util.HashMap<String, String> all = new java.util.HashMap<>(options);
            all.putAll(readOptions);
            return new StoreScan(ReadOptions.parse(new CaseInsensitiveStringMap(all)));
        }
    }
}
