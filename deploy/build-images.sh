#!/usr/bin/env bash
# Build every image deploy/compose.local.yaml names, with podman, where no image registry can be
# reached: the Watchtower and Spark images from the project's Dockerfile on the local Debian base
# (deploy/base-image.sh), a Kafka image from the Maven jars the embedded broker runs, and
# Prometheus from Debian's package. Builds reach the package registries over the host's network,
# with the host's CA bundle mounted read-only (a TLS-inspecting network needs it).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${WATCHTOWER_BASE_IMAGE:-localhost/watchtower-base:bookworm}
PY=${PYTHON:-.venv/bin/python}
CA=/etc/ssl/certs/ca-certificates.crt
common=(--network host --layers)
if [ -f "$CA" ]; then common+=(-v "$CA:$CA:ro"); fi

bash deploy/base-image.sh

# The Watchtower images build from the working tree, or from the last commit alone with
# WATCHTOWER_DEPLOY_FROM_HEAD=1 (what a fresh clone holds; uncommitted edits stay out).
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
app_ctx=.
if [ -n "${WATCHTOWER_DEPLOY_FROM_HEAD:-}" ]; then
  mkdir "$ctx/app" && git archive HEAD | tar -x -C "$ctx/app"
  app_ctx="$ctx/app"
fi

echo "== image localhost/watchtower:local (Dockerfile, last stage)"
podman build "${common[@]}" --build-arg "PYTHON_IMAGE=$BASE" -t localhost/watchtower:local "$app_ctx"
echo "== image localhost/watchtower-spark:local (Dockerfile, target spark)"
podman build "${common[@]}" --build-arg "PYTHON_IMAGE=$BASE" --target spark -t localhost/watchtower-spark:local \
  "$app_ctx"

echo "== image localhost/watchtower-kafka (the embedded broker's Maven jars)"
libs=$("$PY" -c "from watchtower.local.jars import ensure_bundle, KAFKA_BUNDLE; print(ensure_bundle(KAFKA_BUNDLE))")
version=$("$PY" -c "from watchtower.local.jars import KAFKA_VERSION; print(KAFKA_VERSION)")
mkdir "$ctx/kafka"
cp -r deploy/kafka/Containerfile deploy/kafka/bin "$ctx/kafka/"
cp -r "$libs" "$ctx/kafka/libs"
podman build "${common[@]}" --build-arg "BASE_IMAGE=$BASE" -t "localhost/watchtower-kafka:$version" "$ctx/kafka"

echo "== image localhost/watchtower-prometheus:local (Debian's prometheus)"
podman build "${common[@]}" --build-arg "BASE_IMAGE=$BASE" -t localhost/watchtower-prometheus:local deploy/prometheus
