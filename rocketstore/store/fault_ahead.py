"""FaultAheadService: faults the commit log's pages in ahead of the writer.

A file not warmed at allocation (``warm_maped_file_enable`` off, RocketMQ's default too) takes
a page fault on the putting thread for every 4 KiB written -- a zero-filled page and an ext4
block reservation, several microseconds each here: more than the rest of the 17 puts of 100-byte
messages that fill the page. Instead, this thread keeps a window ahead of the write position
faulted in (the compiled loop, ``CommitLog.fault_ahead_loop``, without the GIL), megabytes per
call (about a tenth of a write fault's cost per page), so puts only copy. It never writes a byte:
``MADV_POPULATE_WRITE`` only maps the pages, so a writer that overtakes it is safe. Where the
kernel lacks it (before Linux 5.14) the thread ends at its first request and puts fault as
before.
"""
from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("rocketstore.store.fault_ahead")

WINDOW = 64 << 20       # bytes kept faulted in ahead of the writer


class FaultAheadService:
    """Runs ``commit_log.fault_ahead_loop`` in a thread; ``shutdown()`` stops and joins it
    (before the store unmaps any file)."""

    def __init__(self, commit_log, window: int = WINDOW) -> None:
        self.commit_log = commit_log
        self.window = window
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.commit_log.enable_fault_ahead(self.window)
        self._thread = threading.Thread(target=self._run, name="FaultAheadService", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rc = self.commit_log.fault_ahead_loop()
        if rc < 0:
            self.commit_log.enable_fault_ahead(0)      # puts stop asking
            log.info("fault-ahead unavailable (%s): puts fault their own pages",
                     os.strerror(-rc))

    def shutdown(self) -> None:
        self.commit_log.stop_fault_ahead()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
