from typing import Any

import numpy as np

from rocketstore.store._mapped import MappedFile

RECORD_DTYPE: np.dtype[Any]
KEY_DTYPE: np.dtype[Any]
SKIPPED: str
REC_REASONS: dict[int, str]

def walk_file(mf: MappedFile, check_crc: bool = ..., topics: dict[bytes, int] | None = ...,
              limit: int = ..., crc_from: int = ...) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]], int, bool]: ...
def reachable_keys(f: Any, phys: np.ndarray, hashes: np.ndarray, found: np.ndarray) -> None: ...
