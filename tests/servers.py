"""Start ``rocketstore namesrv`` / ``rocketstore broker`` as processes for a test, stop them after:
``rocketstore.tools.servers``, which the benchmarks use too (so an installed package has it)."""
import time
from typing import Callable

import pytest

from rocketstore.tools.servers import REPO, ServerProcess, start_broker, start_namesrv

__all__ = ["REPO", "ServerProcess", "start_broker", "start_namesrv", "wait_until"]


def wait_until(pred: Callable[[], object], what: str, within: float, step: float = 0.1) -> None:
    """Poll ``pred`` until it is true; fail naming ``what`` after ``within`` s (a deadline for
    polling, never a timing assertion)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(step)
    pytest.fail(f"not within {within:g} s: {what}")
