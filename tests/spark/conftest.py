"""Spark tests: PySpark on local[2] against a real `pyrmq standalone`
subprocess (127.0.0.1, ephemeral ports). Every test here is marked
`spark`; a developer skips them with `-m "not spark"`, CI runs them.

Spark's Python workers are separate processes: they find pyrmq and
spark_integration through PYTHONPATH (set here to the repository, which
also lets Spark find pyspark_rocketmq, so format("rocketmq") works without
a register call)."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess

REPO = pathlib.Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A `pyrmq standalone` process for this module's tests."""
    # the property filter on: readers may select with SQL92
    settings = {**SMALL_STORE, "enablePropertyFilter": "true"}
    proc = StandaloneProcess(tmp_path_factory.mktemp("standalone"), settings)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
