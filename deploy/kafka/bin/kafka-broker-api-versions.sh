#!/bin/bash
# The health check compose.yaml runs (`--bootstrap-server HOST:PORT --command-config FILE`). The
# release's jars the embedded broker uses do not hold the api-versions tool, and a JVM per check
# is more than a 2-core host can spare under load, so this asks the one thing the check is for:
# the broker's listener accepts connections, which it does only once the broker has started
# (Kafka opens its acceptors last).
server=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bootstrap-server) server=$2; shift 2 ;;
    *) shift ;;
  esac
done
host=${server%:*}
port=${server##*:}
exec 3<>"/dev/tcp/$host/$port"
