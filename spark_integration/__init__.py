"""PySpark integration for pyrmq: UDF-based producers and the `rocketmq`
Spark data source (batch and streaming). Installed with
`pip install 'pyrmq[spark]'` (pyspark >= 4.2, pyarrow).

    from spark_integration import producer_udf, send_dataframe, row_producer_udf
    spark.read.format("rocketmq").option("nameServer", ns).option("topic", t).load()

README "Spark" has the guide; spark_integration.options lists every option."""

from __future__ import annotations

from typing import Any

__all__ = [
    "OptionError",
    "RocketMQDataSource",
    "producer_udf",
    "register",
    "row_producer_udf",
    "send_dataframe",
]


def __getattr__(name: str) -> Any:
    # lazy, so importing the package does not start pyspark's machinery
    if name in ("producer_udf", "row_producer_udf", "send_dataframe"):
        from spark_integration import producer

        return getattr(producer, name)
    if name in ("RocketMQDataSource", "register"):
        from spark_integration import datasource

        return getattr(datasource, name)
    if name == "OptionError":
        from spark_integration.options import OptionError

        return OptionError
    raise AttributeError(f"module 'spark_integration' has no attribute {name!r}")
