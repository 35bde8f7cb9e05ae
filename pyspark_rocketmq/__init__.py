"""Lets Spark find format("rocketmq") without a register call: at startup
PySpark imports every top-level module named pyspark_* and registers its
DefaultSource (a DataSource subclass) under DefaultSource.name()."""

from spark_integration.datasource import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
