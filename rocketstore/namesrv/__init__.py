"""The NameServer: brokers register their topics, clients ask where a topic lives.

``NameServer`` (``server``) serves RocketMQ's NameServer request codes over the remoting
protocol; ``RouteInfoManager`` (``routeinfo``) holds the route tables and ``KVConfigManager``
(``kvconfig``) the KV config. Run it with ``rocketstore namesrv``.
"""
from rocketstore.namesrv.server import NameServer

__all__ = ["NameServer"]
