#!/bin/sh
# One-shot, after the brokers are healthy: create the SCRAM credentials of the admin, service, runner and
# client principals (as the TLS-authenticated admin on the internal listener). Idempotent: setting
# a SCRAM credential again replaces it with the same secret. The ACLs are created afterwards by
# the `init` service (`python -m watchtower.local.security grant PREFIX`), from the same rules as
# `watchtower local up --secure`.
set -eu
BOOT=kafka-1:19094,kafka-2:19094,kafka-3:19094
for who in admin service runner client; do
  /opt/kafka/bin/kafka-configs.sh --bootstrap-server "$BOOT" --command-config /secrets/admin-ssl.properties \
    --alter --entity-type users --entity-name "$who" \
    --add-config "SCRAM-SHA-512=[iterations=8192,password=$(cat /secrets/$who.password)]"
done
echo "SCRAM credentials created"
