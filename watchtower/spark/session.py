"""A local SparkSession, handed the Kafka connector jars it needs (Spark's Kafka source and sink,
spark-avro) by whoever starts the job: a job runs on any cluster, so this module fetches nothing.

The jars come from the `jars` argument, else from ``$WATCHTOWER_SPARK_JARS``: comma-separated paths,
each a jar or a directory of jars (the local stack names the folder it caches the connector in,
`watchtower.local.jars.spark_jars_dir`; the CLI passes `watchtower.local.jars.spark_jars`). With
neither, Spark is given none: the cluster provides them (``spark-defaults.conf``, ``--jars``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

ENV_SPARK_JARS: Final = "WATCHTOWER_SPARK_JARS"


def configured_jars(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The jars ``$WATCHTOWER_SPARK_JARS`` names, each directory replaced by the jars in it (sorted).

    A directory without a jar is an error that says what to do: the job would otherwise fail later,
    on the first Kafka read, with "Failed to find data source: kafka"."""
    return expand_jars(part for part in environ.get(ENV_SPARK_JARS, "").split(",") if part.strip())


def expand_jars(entries: Iterable[str | Path]) -> list[str]:
    """`entries` as jar paths: a directory stands for the ``*.jar`` files in it."""
    jars: list[str] = []
    for entry in entries:
        path = Path(str(entry).strip()).expanduser()
        if path.is_dir() or not path.suffix:
            found = sorted(path.glob("*.jar"))
            if not found:
                raise FileNotFoundError(
                    f"no Spark Kafka connector jars in {path} (named by {ENV_SPARK_JARS}); run any `watchtower "
                    f"spark` command once to fetch them there, or point {ENV_SPARK_JARS} at the jars")
            jars += [str(p) for p in found]
        else:
            jars.append(str(path))
    return jars


def local_session(app_name: str, master: str = "local[1]", extra: dict[str, str] | None = None,
                  jars: Iterable[str | Path] | None = None) -> Any:
    """A small local SparkSession with `jars` (default: `configured_jars`) on its classpath.

    The jars are passed with ``spark.jars`` (files, no Ivy resolution), which works offline once
    they are on disk. Shuffle partitions and the UI are cut down for a 2-core machine.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Everything talks over loopback; do not let Spark pick a routable interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    files = configured_jars() if jars is None else expand_jars(jars)
    builder = SparkSession.builder.master(master).appName(app_name)
    if files:
        builder = builder.config("spark.jars", ",".join(files))
    builder = (builder.config("spark.sql.shuffle.partitions", "2")
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
