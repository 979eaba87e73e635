#!/bin/sh
# The broker's entry point: server.properties from the KAFKA_* environment (KAFKA_FOO_BAR is
# foo.bar; "___" is "-" and "__" is "_", as apache/kafka reads them), the storage formatted with
# CLUSTER_ID unless it is already, then the broker in the foreground.
set -eu
PROPS=/opt/kafka/config/server.properties
: > "$PROPS"
env | grep '^KAFKA_' | grep -v -e '^KAFKA_HEAP_OPTS=' -e '^KAFKA_OPTS=' | while IFS='=' read -r key value; do
  name=$(printf '%s' "${key#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
  printf '%s=%s\n' "$name" "$value" >> "$PROPS"
done
if [ ! -f "${KAFKA_LOG_DIRS:-/var/lib/kafka/data}/meta.properties" ]; then
  /opt/kafka/bin/kafka-run-class.sh kafka.tools.StorageTool format --cluster-id "$CLUSTER_ID" -c "$PROPS" --ignore-formatted
fi
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$PROPS"
