# The Python image every stage starts from. Any image with CPython 3.11, pip and a Debian userland
# will do: `--build-arg PYTHON_IMAGE=...` names another (deploy/compose.local.yaml builds from a
# local Debian image made by deploy/base-image.sh where no registry can be reached).
ARG PYTHON_IMAGE=python:3.11-slim

# The locked dependencies and this package, installed once; the two images below start from here.
FROM ${PYTHON_IMAGE} AS app
WORKDIR /app
# The locked dependencies first, in a layer of their own: a change to the package alone rebuilds
# only the short step after it.
COPY requirements.lock ./
RUN pip install --no-cache-dir uv==0.13.9 \
 && uv pip sync --system requirements.lock \
 && rm -rf /root/.cache
COPY pyproject.toml README.md ./
COPY watchtower ./watchtower
RUN uv pip install --system --no-deps . && rm -rf /root/.cache

# Spark's master and workers for the bulk jobs (`watchtower spark ... --master spark://spark-master:7077`):
# the same Python, package and pyspark (which ships Spark 4.0.0 itself), plus a JRE, so the workers
# run the jobs' Arrow UDFs with this package's own rules.
FROM app AS spark
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
ENV SPARK_HOME=/opt/spark PYSPARK_PYTHON=python3
CMD ["/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master"]

# The Watchtower services image (stream-actor workers, projection/API workers, the key manager, the
# CLI). It is the last stage, so `build: .` without a target builds it.
FROM app
ENV WATCHTOWER_HOME=/var/lib/watchtower
CMD ["watchtower", "--help"]
