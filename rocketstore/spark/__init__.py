"""PySpark data source for rocketstore (and RocketMQ broker) store directories.

``spark.read.format("rocketstore").load(path)`` works once ``rocketstore`` is installed (the
top-level module ``pyspark_rocketstore`` exposes ``DefaultSource``); ``register(spark)``
registers the source explicitly. The JVM batch reader, ``format("rocketstore-jvm")``, is put
on a session by ``configure(builder)`` / ``session_builder()`` (``rocketstore.spark.jvmjar``).
Needs pyspark >= 4.0 and pyarrow (``pip install rocketstore[spark]``). See ``rocketstore.spark.datasource`` for the options.
"""
from __future__ import annotations

from typing import Any

from rocketstore.spark.datasource import RocketStoreDataSource
from rocketstore.spark.jvmjar import configure, jvm_jar, session_builder

__all__ = ["RocketStoreDataSource", "configure", "jvm_jar", "register", "session_builder"]


def register(spark: Any) -> None:
    """Register the ``rocketstore`` format with ``spark`` (a SparkSession)."""
    spark.dataSource.register(RocketStoreDataSource)
