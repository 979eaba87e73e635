#!/bin/sh
# Run a class of the Kafka release with its jars; KAFKA_HEAP_OPTS sizes the heap (small by default),
# KAFKA_JVM_PERFORMANCE_OPTS replaces the JVM options Kafka's own scripts use by default.
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true} \
  -XX:+ExitOnOutOfMemoryError \
  -Dlog4j2.configurationFile=/opt/kafka/bin/log4j2.properties -cp '/opt/kafka/libs/*' "$@"
