"""One local SparkSession for every Spark test of the session: a JVM and a SparkContext start once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from watchtower.local.jars import spark_jars
    from watchtower.spark.session import local_session

    session = local_session("watchtower-tests", master="local[2]", jars=spark_jars())
    yield session
    session.stop()
