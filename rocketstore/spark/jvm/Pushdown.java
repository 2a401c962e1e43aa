package rocketstore.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * Filters a read can use to read less: topic / queue_id / tags equal to or in a set of
 * values (queues pruned; the consume queue's tags codes scanned), store_timestamp bounds
 * (rounded outwards to ms). Each only narrows the options to a superset of the rows the
 * filter keeps; Spark applies the filters to the rows as well.
 */
final class Pushdown {
    private Pushdown() { }

    /** Narrow {@code o} by the filters it can use; returns those. */
    static Filter[] apply(Filter[] filters, ReadOptions o) {
        List<Filter> used = new ArrayList<>();
        for (Filter f : filters) {
            if (use(f, o)) {
                used.add(f);
            }
        }
        return used.toArray(new Filter[0]);
    }

    private static boolean use(Filter f, ReadOptions o) {
        if (f instanceof EqualTo e) {
            return values(e.attribute(), new Object[] {e.value()}, o);
        }
        if (f instanceof In in) {
            return values(in.attribute(), in.values(), o);
        }
        if (f instanceof GreaterThan g && "store_timestamp".equals(g.attribute())) {
            return lower(g.value(), o);
        }
        if (f instanceof GreaterThanOrEqual g && "store_timestamp".equals(g.attribute())) {
            return lower(g.value(), o);
        }
        if (f instanceof LessThan l && "store_timestamp".equals(l.attribute())) {
            return upper(l.value(), o);
        }
        if (f instanceof LessThanOrEqual l && "store_timestamp".equals(l.attribute())) {
            return upper(l.value(), o);
        }
        return false;
    }

    private static boolean values(String column, Object[] values, ReadOptions o) {
        Set<String> strings = new TreeSet<>();
        Set<Integer> ints = new TreeSet<>();
        for (Object v : values) {
            if (v instanceof String s) {
                strings.add(s);
            } else if (v instanceof Integer i) {
                ints.add(i);
            } else if (v != null) {
                return false;
            }                   // null matches no row of an = / IN
        }
        switch (column) {
            case "topic" -> o.topics = intersect(o.topics, strings);
            case "queue_id" -> o.queueIds = intersect(o.queueIds, ints);
            case "tags" -> {
                Set<String> tags = intersect(o.tags == null ? null : Set.of(o.tags), strings);
                if (tags.size() > ReadOptions.MAX_TAGS) {
                    return false;   // too many for the consume-queue scan: not pushed
                }
                o.tags = tags.toArray(new String[0]);
            }
            default -> {
                return false;
            }
        }
        return true;
    }

    private static <T> Set<T> intersect(Set<T> current, Set<T> wanted) {
        if (current == null) {
            return wanted;
        }
        Set<T> out = new TreeSet<>(current);
        out.retainAll(wanted);
        return out;
    }

    private static boolean lower(Object v, ReadOptions o) {
        long us = micros(v);
        if (us == Long.MIN_VALUE) {
            return false;
        }
        o.minTs = Math.max(o.minTs, Math.floorDiv(us, 1000));
        return true;
    }

    private static boolean upper(Object v, ReadOptions o) {
        long us = micros(v);
        if (us == Long.MIN_VALUE) {
            return false;
        }
        o.maxTs = Math.min(o.maxTs, Math.floorDiv(us + 999, 1000));
        return true;
    }

    /** Microseconds since the epoch of a filter's timestamp value; MIN_VALUE: not one. */
    private static long micros(Object v) {
        Instant t = v instanceof Timestamp ts ? ts.toInstant() : v instanceof Instant i ? i : null;
        if (t == null) {
            return Long.MIN_VALUE;
        }
        return Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000L), t.getNano() / 1000);
    }
}
