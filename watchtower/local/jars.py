"""Fetch the Kafka broker and Spark connector jars from Maven Central, once.

A *bundle* is a named set of Maven coordinates. ``ensure_bundle`` writes a tiny pom,
runs ``mvn dependency:copy-dependencies`` into the cache and marks the folder complete;
later calls return the cached folder without touching the network.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from watchtower.local.errors import LocalStackError
from watchtower.local.paths import cache_dir

#: The broker release. 4.3.1 is the newest Apache Kafka release whose artifacts are all on
#: Maven Central and that passes the three-client test (tests/local/test_client_compat.py).
KAFKA_VERSION = "4.3.1"
#: Spark's Kafka connector must match the pyspark version pinned in pyproject.toml. 4.0.0 is the
#: newest Spark whose connector, token provider and Avro jars are all on Maven Central.
SPARK_VERSION = "4.0.0"
LOG4J_VERSION = "2.24.3"
#: The Jolokia JVM agent (JMX over HTTP/JSON), attached to the embedded broker only when its spec asks
#: for metrics (``ClusterSpec.metrics_port``), e.g. by the benchmarks that read request counters.
JOLOKIA_VERSION = "2.5.1"


@dataclass(frozen=True)
class Bundle:
    """A named, versioned set of Maven artifacts (group:artifact:version[:classifier])."""

    name: str
    version: str
    artifacts: tuple[str, ...]
    #: False: fetch exactly the listed jars. Spark's poms name an extra repository that is not
    #: reachable everywhere, and pyspark already ships Spark's own runtime, so the connector
    #: bundle lists its few real runtime jars explicitly instead of walking Spark's graph.
    transitive: bool = True


KAFKA_BUNDLE = Bundle(
    "kafka",
    KAFKA_VERSION,
    (
        f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
        # Kafka 4 logs through slf4j 1.7; route it to log4j2 so the broker log is configurable.
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
        f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
    ),
)

#: The agent is one self-contained jar (classifier ``javaagent``), attached with ``-javaagent:``.
JOLOKIA_BUNDLE = Bundle(
    "jolokia",
    JOLOKIA_VERSION,
    (f"org.jolokia:jolokia-agent-jvm:{JOLOKIA_VERSION}:javaagent",),
    transitive=False,
)

SPARK_KAFKA_BUNDLE = Bundle(
    "spark-kafka",
    SPARK_VERSION,
    (
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
        f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{SPARK_VERSION}",
        f"org.apache.spark:spark-avro_2.13:{SPARK_VERSION}",
        # The versions Spark 4.0.0's own build pins (spark-parent: kafka.version, commons-pool2.version).
        "org.apache.kafka:kafka-clients:3.9.0",
        "org.apache.commons:commons-pool2:2.12.0",
    ),
    transitive=False,
)

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>watchtower.local</groupId>
  <artifactId>{name}-runtime</artifactId>
  <version>1</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def _pom(bundle: Bundle) -> str:
    deps = []
    exclusions = ("" if bundle.transitive else
                  "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>")
    for coord in bundle.artifacts:
        group, artifact, version, *rest = coord.split(":")
        classifier = f"<classifier>{rest[0]}</classifier>" if rest else ""
        deps.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{classifier}{exclusions}</dependency>"
        )
    return _POM.format(name=bundle.name, deps="\n".join(deps))


def bundle_dir(bundle: Bundle) -> Path:
    """The cache folder that holds (or will hold) the bundle's jars."""
    return cache_dir() / "jars" / f"{bundle.name}-{bundle.version}"


def require_tool(name: str, purpose: str) -> str:
    """Return the path of ``name`` on PATH or raise a one-line, actionable error."""
    found = shutil.which(name)
    if found is None:
        raise LocalStackError(
            f"{name} is not installed or not on PATH; it is needed {purpose}. "
            f"Install it (Debian: apt-get install -y {'default-jdk-headless' if name == 'java' else name}) "
            "and run the command again."
        )
    return found


def ensure_bundle(bundle: Bundle, *, quiet: bool = True) -> Path:
    """Return the folder of jars for ``bundle``, fetching it with Maven on first use.

    Raises:
        LocalStackError: Maven is missing or the fetch failed (the message says how to retry).
    """
    target = bundle_dir(bundle)
    marker = target / ".complete"
    if marker.exists():
        return target / "lib"
    mvn = require_tool("mvn", "to fetch the Kafka and Spark jars from Maven Central")
    target.mkdir(parents=True, exist_ok=True)
    (target / "pom.xml").write_text(_pom(bundle))
    lib = target / "lib"
    if lib.exists():
        shutil.rmtree(lib)
    cmd = [mvn, "-B", "-f", str(target / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        log = target / "mvn-error.log"
        log.write_text(proc.stdout + proc.stderr)
        reason = _failure_reason(proc.stdout + proc.stderr)
        raise LocalStackError(
            f"fetching {bundle.name} {bundle.version} jars with Maven failed ({reason[:160]}); "
            f"check network access to Maven Central and retry; full log: {log}"
        )
    marker.write_text("ok\n")
    return lib


def _failure_reason(output: str) -> str:
    """The most telling phrase of a Maven failure, for a one-line message."""
    for pattern in (r"Unknown host [^:\s]+", r"Could not find artifact \S+", r"\S+ was not found",
                    r"Could not transfer artifact \S+", r"Connection refused", r"timed out"):
        found = re.search(pattern, output)
        if found:
            return found.group(0)
    errors = [ln.strip() for ln in output.splitlines() if "[ERROR]" in ln]
    return errors[0][-160:] if errors else "no detail"


def classpath(bundle: Bundle) -> str:
    """A Java classpath string for every jar in the bundle (fetching it if needed)."""
    lib = ensure_bundle(bundle)
    return ":".join(str(p) for p in sorted(lib.glob("*.jar")))


def spark_jars() -> list[str]:
    """The Spark Kafka connector's jars (fetched once): what a Spark job started here is handed
    (`watchtower.spark.session.local_session`'s `jars`)."""
    return [str(p) for p in sorted(ensure_bundle(SPARK_KAFKA_BUNDLE).glob("*.jar"))]


def spark_jars_dir() -> Path:
    """The folder the Spark Kafka connector's jars are cached in (filled by `spark_jars`; nothing is fetched)."""
    return bundle_dir(SPARK_KAFKA_BUNDLE) / "lib"


def jolokia_agent_jar() -> Path:
    """The Jolokia JVM agent jar (fetched once, like the broker's jars)."""
    jars = sorted(ensure_bundle(JOLOKIA_BUNDLE).glob("jolokia-agent-jvm-*.jar"))
    if not jars:
        raise LocalStackError(f"the Jolokia bundle in {bundle_dir(JOLOKIA_BUNDLE)} holds no agent jar; "
                              "remove that folder and retry")
    return jars[0]
