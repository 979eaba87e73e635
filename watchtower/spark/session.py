"""Local SparkSession wired to the Kafka connector jars fetched from Maven Central."""

from __future__ import annotations

import os
import sys
from typing import Any

from watchtower.local.jars import SPARK_KAFKA_BUNDLE, classpath


def local_session(app_name: str, master: str = "local[1]", extra: dict[str, str] | None = None) -> Any:
    """A small local SparkSession with the Kafka source/sink and spark-avro on its classpath.

    The jars are passed with ``spark.jars`` (files, no Ivy resolution), which works offline once
    they are cached. Shuffle partitions and the UI are cut down for a 2-core machine.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Everything talks over loopback; do not let Spark pick a routable interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars = classpath(SPARK_KAFKA_BUNDLE).replace(":", ",")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.jars", jars)
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def default_master() -> str:
    """``local[n]`` with n = the machine's cores, at most 2 (the jobs share a small machine)."""
    return f"local[{max(1, min(2, os.cpu_count() or 1))}]"
