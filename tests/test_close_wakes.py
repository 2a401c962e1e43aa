"""close() wakes every long poll, read-only ones too (issue 16 item 6)."""
from __future__ import annotations

import threading
import time

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.status import GetMessageStatus


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writer"])
def test_close_wakes_every_long_poll(tmp_path, read_only):
    root = str(tmp_path / "s")
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    writer = MessageStore.open(root, cfg)
    writer.put_message(Message("T", b"x"), 0)
    writer.dispatch_service.wakeup()
    store = MessageStore.open(root, cfg, read_only=True) if read_only else writer
    results: list = []
    errors: list = []

    def poll(qid: int) -> None:
        try:
            results.append(store.get_message("g", "T", qid, 1 if qid == 0 else 0, 1,
                                             timeout_ms=10**9))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    # daemon threads: a poll that ignores close() must fail the test, not hang the run
    threads = [threading.Thread(target=poll, args=(i % 2,), daemon=True) for i in range(20)]
    for t in threads:
        t.start()
    threading.Event().wait(0.3)         # let every poller reach its wait
    store.close()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a long poll ignored close()"
    assert errors == []
    assert len(results) == 20
    assert all(r.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE,
                            GetMessageStatus.NO_MESSAGE_IN_QUEUE) for r in results)
    writer.close()
