"""What the Spark tests share: one local SparkSession for the session (a JVM and a SparkContext
start once), and the Spark stack, one per module, with the module's `SID` stream published on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spark_script import publish_script
from stack_fixture import start_stack

from watchtower.client.http import ApiClient
from watchtower.local.stack import ServiceSet


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from watchtower.local.jars import spark_jars
    from watchtower.spark.session import local_session

    session = local_session("watchtower-tests", master="local[2]", jars=spark_jars())
    yield session
    session.stop()


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceSet]:
    """The module's stack, without a replay worker: a Spark job alone fulfils the replays it registers
    (a module that wants the service's replay too starts one: ``stack.start_replay``)."""
    with start_stack(kafka_bootstrap, tmp_path_factory.mktemp("spark-stack-logs"), replay=False) as services:
        yield services


@pytest.fixture(scope="module")
def api(stack: ServiceSet, request: pytest.FixtureRequest) -> ApiClient:
    """The stack's API, with the module's stream `SID` created and its script published (spark_script)."""
    client = ApiClient(stack.api_url)
    publish_script(client, request.module.SID)
    return client
