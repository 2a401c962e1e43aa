"""A consumer's ``ConsumerRunningInfo``: the answer to GET_CONSUMER_RUNNING_INFO (307).

``mqadmin consumerStatus`` (and ``consumerProgress -s``) asks a broker, which relays the request
to the consumer over the consumer's own connection. The Java client answers with its settings
(``properties``), subscriptions, one ``ProcessQueueInfo`` per queue it holds (``mqTable``,
keyed by message queue in fastjson's object-key form) and, when asked, its threads' stacks
(``jstack``). This builds the same document from a ``rocketstore.client`` consumer; the
per-topic consume rates of ``statusTable`` are not counted here and the table is empty.
"""
from __future__ import annotations

import sys
import threading
import traceback
from typing import Any

from rocketstore.remoting import fastjson
from rocketstore.remoting.admin_bodies import mq_map, subscription_json

CLIENT_VERSION_DESC = "V4_9_8"          # what MQVersion.getVersionDesc(CURRENT_VERSION) says


def _process_queue_info(pq: Any, commit_offset: int) -> dict[str, Any]:
    offsets = pq.cached_offsets()
    return {"cachedMsgCount": pq.msg_count,
            "cachedMsgMaxOffset": max(offsets) if offsets else 0,
            "cachedMsgMinOffset": min(offsets) if offsets else 0,
            "cachedMsgSizeInMiB": pq.msg_size // (1024 * 1024),
            "commitOffset": commit_offset, "droped": bool(pq.dropped),
            "lastConsumeTimestamp": pq.last_consume_timestamp,
            "lastLockTimestamp": pq.last_lock_timestamp,
            "lastPullTimestamp": pq.last_pull_timestamp, "locked": bool(pq.locked),
            "transactionMsgCount": 0, "transactionMsgMaxOffset": 0, "transactionMsgMinOffset": 0,
            "tryUnlockTimes": 0}


def _stacks() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f'"{names.get(ident, ident)}"\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(out)


def running_info(consumer: Any, namesrv_addr: str, jstack: bool = False) -> bytes:
    """``ConsumerRunningInfo`` JSON of ``consumer`` (fields in fastjson's order)."""
    props = {"consumerGroup": consumer.group,
             "messageModel": consumer.message_model.value,
             "consumeFromWhere": consumer.consume_from_where.value,
             "consumeTimestamp": str(consumer.consume_timestamp_ms),
             "PROP_NAMESERVER_ADDR": namesrv_addr,
             "PROP_CONSUME_TYPE": consumer.consume_type.value,
             "PROP_CONSUME_ORDERLY": str(bool(consumer.is_orderly())).lower(),
             "PROP_CLIENT_VERSION": CLIENT_VERSION_DESC,
             "PROP_CONSUMER_START_TIMESTAMP": str(getattr(consumer, "start_timestamp_ms", 0))}
    threads = getattr(consumer, "consume_thread_nums", None)
    if threads is not None:
        props["PROP_THREADPOOL_CORE_SIZE"] = str(threads)
    committed = consumer.offset_store.clone_offset_table() if consumer.offset_store else {}
    table = {mq: _process_queue_info(pq, committed.get(mq, -1))
             for mq, pq in list(consumer.rebalance.process_queue_table.items())}
    subs = sorted((subscription_json(s) for s in consumer.subscriptions_for_rebalance().values()),
                  key=lambda s: s["topic"])
    doc = ('{"jstack":' + fastjson.dumps(_stacks() if jstack else "")
           + ',"mqTable":' + mq_map(table)
           + ',"properties":' + fastjson.dumps({k: props[k] for k in sorted(props)})
           + ',"statusTable":{},"subscriptionSet":' + fastjson.dumps(subs) + "}")
    return doc.encode("utf-8")


__all__ = ["running_info"]
