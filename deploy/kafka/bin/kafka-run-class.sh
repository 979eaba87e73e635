#!/bin/sh
# Run a class of the Kafka release with its jars; KAFKA_HEAP_OPTS sizes the heap (small by default).
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
  -Dlog4j2.configurationFile=/opt/kafka/bin/log4j2.properties -cp '/opt/kafka/libs/*' "$@"
