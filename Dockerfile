# Spark's master and workers for the bulk jobs (`watchtower spark ... --master spark://spark-master:7077`):
# the same Python, package and pyspark (which ships Spark 4.0.0 itself), plus a JRE, so the workers
# run the jobs' Arrow UDFs with this package's own rules.
FROM python:3.11-slim AS spark
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
COPY watchtower ./watchtower
RUN pip install --no-cache-dir uv==0.13.9 \
 && uv pip sync --system requirements.lock \
 && uv pip install --system --no-deps . \
 && ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
ENV SPARK_HOME=/opt/spark PYSPARK_PYTHON=python3
CMD ["/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master"]

# The Watchtower services image (stream-actor workers, projection/API workers, the CLI). It is the
# last stage, so `build: .` without a target builds it.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
COPY watchtower ./watchtower
RUN pip install --no-cache-dir uv==0.13.9 \
 && uv pip sync --system requirements.lock \
 && uv pip install --system --no-deps .
ENV WATCHTOWER_HOME=/var/lib/watchtower
CMD ["watchtower", "--help"]
