"""Start ``rocketstore namesrv`` / ``rocketstore broker`` as processes for a test, stop them after:
``rocketstore.tools.servers``, which the benchmarks use too (so an installed package has it)."""
from rocketstore.tools.servers import REPO, ServerProcess, start_broker, start_namesrv

__all__ = ["REPO", "ServerProcess", "start_broker", "start_namesrv"]
