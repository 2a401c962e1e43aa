"""PySpark data source for rocketstore (and RocketMQ broker) store directories.

``spark.read.format("rocketstore").load(path)`` works once ``rocketstore`` is installed (the
top-level module ``pyspark_rocketstore`` exposes ``DefaultSource``); ``register(spark)``
registers the source explicitly. Needs pyspark >= 4.0 and pyarrow (``pip install
rocketstore[spark]``). See ``rocketstore.spark.datasource`` for the options.
"""
from __future__ import annotations

from typing import Any

from rocketstore.spark.datasource import RocketStoreDataSource

__all__ = ["RocketStoreDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``rocketstore`` format with ``spark`` (a SparkSession)."""
    spark.dataSource.register(RocketStoreDataSource)
