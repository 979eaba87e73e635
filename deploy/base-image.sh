#!/usr/bin/env bash
# A Debian bookworm image that stands in for python:3.11-slim where no image registry can be
# reached: made from Debian's own packages (mmdebstrap), then imported into podman as
# watchtower-base:bookworm. Debian's CPython is 3.11, as the slim image's; `python` and `pip` are
# on PATH, and the packages the Dockerfile installs go to the system site (no externally-managed
# marker), as they would in the slim image. uv reads the system's CA store (UV_NATIVE_TLS).
# Skipped when the image exists already (WATCHTOWER_DEPLOY_REBUILD_BASE=1 makes it again).
set -euo pipefail
IMAGE=${WATCHTOWER_BASE_IMAGE:-localhost/watchtower-base:bookworm}
if [ -z "${WATCHTOWER_DEPLOY_REBUILD_BASE:-}" ] && podman image exists "$IMAGE"; then
  echo "base image $IMAGE exists"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=minbase --quiet \
  --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
  --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$work/base.tar"
podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV UV_NATIVE_TLS=1' \
  --change 'CMD ["python3"]' \
  "$work/base.tar" "$IMAGE" >/dev/null
echo "base image $IMAGE imported"
