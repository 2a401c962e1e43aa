"""Consume-queue scans over buffers of 20-byte units (docs/format.md §3, 5.1); see _scan.pyx."""
from collections.abc import Iterable
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

MAX_CODES: int
UNIT_SIZE: int

_Codes = SupportsIndex | Iterable[SupportsIndex]

def tag_mask(units: Buffer, codes: _Codes) -> npt.NDArray[np.bool_]: ...
def count_matches(units: Buffer, codes: _Codes, start: SupportsIndex = ...,
                  end: SupportsIndex | None = ...) -> int: ...
def match_indices(units: Buffer, codes: _Codes, start: SupportsIndex = ...,
                  end: SupportsIndex | None = ...) -> npt.NDArray[np.int64]: ...
def first_matches(units: Buffer, codes: _Codes, start: SupportsIndex, max_units: SupportsIndex,
                  max_count: SupportsIndex) -> npt.NDArray[np.int64]: ...
def units_to_arrays(units: Buffer) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32],
                                            npt.NDArray[np.int64]]: ...
def end_of_data(units: Buffer, start: SupportsIndex = ...) -> int: ...
