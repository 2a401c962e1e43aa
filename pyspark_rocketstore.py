"""Spark finds Python data sources in top-level modules named ``pyspark_*`` that expose
``DefaultSource``: this one makes ``spark.read.format("rocketstore")`` work with no register
call (see ``rocketstore.spark``)."""
from rocketstore.spark.datasource import RocketStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
