"""What the streaming readers (local store and wire) share: how far a micro-batch reads.

A reader gives ``_bounds()`` ({queue: (min offset, max offset)} now) and, when its checkpoint
form is not a plain {queue: offset} map, ``_decode``/``_encode`` between the two. The rest --
the default read limit (``maxRowsPerBatch``), Trigger.AvailableNow's target, the next
micro-batch's end (``advance_offsets``) and the latest offsets reported -- is here once.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from rocketstore.spark.progress import advance_offsets
from rocketstore.spark.scan import _int


class BoundedStreamProgress:
    """Mixin for a ``DataSourceStreamReader`` with ``SupportsTriggerAvailableNow``."""

    max_rows: int | None = None
    _target: dict[Any, int] | None = None

    def _read_limit_option(self, options: Mapping[str, Any]) -> None:
        """``maxRowsPerBatch`` from the (lower-cased) options."""
        v = options.get("maxrowsperbatch")
        self.max_rows = _int({} if v is None else {"maxRowsPerBatch": v}, "maxRowsPerBatch",
                             minimum=1)
        self._target = None

    def _bounds(self) -> dict[Any, tuple[int, int]]:
        raise NotImplementedError

    def _decode(self, offsets: dict) -> dict[Any, int]:
        return offsets

    def _encode(self, offsets: dict[Any, int]) -> dict:
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: hi for k, (lo, hi) in self._bounds().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_rows = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        return self._encode(advance_offsets(self._decode(start), self._bounds(), self._target,
                                            max_rows))

    def reportLatestOffset(self) -> dict | None:
        return self._encode({k: hi for k, (lo, hi) in self._bounds().items()})
