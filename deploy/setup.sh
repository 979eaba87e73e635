#!/usr/bin/env bash
# What the deploy tier needs on a Debian host: podman with runc, netavark, aardvark-dns and iptables (bridge
# networks with DNS), mmdebstrap (the local base image), and podman-compose in deploy/.venv (pinned:
# Debian's is too old for compose.yaml's profiles and depends_on conditions).
set -euo pipefail
cd "$(dirname "$0")"
PODMAN_COMPOSE_VERSION=1.6.0
need=()
for tool in podman runc netavark iptables mmdebstrap; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/lib/podman/$tool" ]; then need+=("$tool"); fi
done
if [ ${#need[@]} -gt 0 ] || [ ! -x /usr/lib/podman/aardvark-dns ]; then
  echo "== installing Debian's podman, runc, netavark, aardvark-dns and mmdebstrap"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get install -y -q podman runc netavark aardvark-dns iptables mmdebstrap uidmap >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q podman runc netavark aardvark-dns iptables mmdebstrap uidmap >/dev/null; }
fi
if [ ! -x .venv/bin/podman-compose ] || ! .venv/bin/podman-compose --version 2>/dev/null | grep -q "$PODMAN_COMPOSE_VERSION"; then
  echo "== installing podman-compose $PODMAN_COMPOSE_VERSION in deploy/.venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q "podman-compose==$PODMAN_COMPOSE_VERSION"
fi
