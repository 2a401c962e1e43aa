"""asyncio clients: ``async with`` producers and consumers over the same machinery as
``rocketstore.client`` (aiokafka's habits, RocketMQ's semantics).

Each class wraps its synchronous counterpart and is constructed like it (``broker=`` for an
in-process ``Broker``, ``namesrv_addr=`` for TCP): queue choice, retries, transactions,
rebalancing, offsets and the consume rules are the sync client's, run once. What the
asyncio side adds is only the waiting: a send's future is awaited, a listener coroutine runs
on the event loop, a poll waits on the loop until the pull service caches messages; no
thread is started or borrowed per send or poll. ``start``/``stop`` (and the rare admin
calls: ``seek``, ``committed``, ``offsets_for_times``) run in the loop's default executor,
since joining a group and leaving it are blocking round trips.

>>> async with AsyncProducer("pg", broker=broker) as p:          # doctest: +SKIP
...     r = await p.send(Message("TopicA", b"hello"))
"""
from rocketstore.aio.producer import AsyncProducer, AsyncTransactionProducer
from rocketstore.aio.pull_consumer import AsyncPullConsumer
from rocketstore.aio.push_consumer import AsyncPushConsumer

__all__ = ["AsyncProducer", "AsyncTransactionProducer", "AsyncPushConsumer",
           "AsyncPullConsumer"]
