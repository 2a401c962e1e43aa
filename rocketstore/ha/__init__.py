"""Master/slave replication on RocketMQ 4.9.8's HA protocol (docs/replication.md).

* ``wire``: the two byte layouts (the slave's 8-byte offset report, the master's 12-byte
  frame header).
* ``connection``: the master's side of one slave connection (reads reports, sends frames of
  raw commit-log bytes straight from the mapped files).
* ``client``: the slave's side (reports its end, appends frames into its own commit log).
* ``acks``: SYNC_MASTER's wait for the slave (GroupTransferService), completing put futures
  a whole group at a time.
* ``service``: ``HAService`` ties them to a broker: the accept socket on the HA port (every
  role binds it), the connections, the slaves' acknowledged offset.
"""
from rocketstore.ha.service import HAService

__all__ = ["HAService"]
