#!/bin/sh
# The health check compose.yaml runs. The release's jars the embedded broker uses do not hold the
# api-versions tool, so this asks the broker for its configuration over the same connection
# instead: it succeeds once the broker answers an authenticated admin request.
KAFKA_HEAP_OPTS=-Xmx128m exec /opt/kafka/bin/kafka-run-class.sh kafka.admin.ConfigCommand "$@" \
  --describe --entity-type brokers --entity-default
