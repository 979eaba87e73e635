#!/bin/sh
# One-shot: a private CA, a TLS keystore per broker, an admin client certificate, random SCRAM
# passwords, and the credentials files the Watchtower services and clients read
# (docs/security.md). Runs in the apache/kafka image (keytool from its JRE); idempotent: a volume
# that already holds secrets is left alone, so a restart never changes a password; a principal a
# newer release added (the runner's) is made on the next run, the others kept.
# The runners' own volume (/runner-secrets) gets runner.json and the CA, nothing else.
set -eu
umask 077
cd /secrets
rand() { head -c 24 /dev/urandom | base64 | tr -d '/+=\n'; }
INTERNAL="kafka-1:19094,kafka-2:19094,kafka-3:19094"
HOST="127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
entry() { # name password bootstrap ca
  printf '"%s": {"bootstrap": "%s", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "%s", "password": "%s", "ssl_ca_location": "%s"}' "$1" "$3" "$1" "$2" "$4"
}
principal() { # name: its password and credentials files, unless it has them already
  if [ -f "$1.password" ]; then return 0; fi
  pw=$(rand)
  printf '%s\n' "$pw" > "$1.password"
  printf '{"version": 1, "principals": {%s}}\n' "$(entry "$1" "$pw" "$INTERNAL" /secrets/ca.pem)" > "$1.json"
  # The same principal as seen from the host (published ports; copy ca.pem next to it).
  printf '{"version": 1, "principals": {%s}}\n' "$(entry "$1" "$pw" "$HOST" ./ca.pem)" > "$1.host.json"
  # The brokers run as uid 1000 in the apache/kafka image (scram-setup reads the password as it).
  chown 1000:1000 "$1.password"
}
runner_volume() {
  cp runner.json ca.pem /runner-secrets/
  chmod 0600 /runner-secrets/runner.json
  chmod 0644 /runner-secrets/ca.pem
}
if [ -f .done ]; then
  for who in admin service runner client; do principal "$who"; done
  runner_volume
  echo "secrets already generated"
  exit 0
fi
STORE_PASS=$(rand)
DAYS=825
keytool -genkeypair -alias ca -dname "CN=watchtower-ca" -keyalg RSA -keysize 3072 -validity 3650 \
  -ext bc:c -keystore ca.p12 -storetype PKCS12 -storepass "$STORE_PASS"
keytool -exportcert -alias ca -keystore ca.p12 -storepass "$STORE_PASS" -rfc -file ca.pem
keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 -storetype PKCS12 \
  -storepass "$STORE_PASS"
# A keystore (key + certificate signed by the CA) for each broker and for the admin tools.
issue() { # name SAN
  keytool -genkeypair -alias "$1" -dname "CN=$1" -keyalg RSA -keysize 2048 -validity "$DAYS" \
    -keystore "$1.p12" -storetype PKCS12 -storepass "$STORE_PASS"
  keytool -certreq -alias "$1" -keystore "$1.p12" -storepass "$STORE_PASS" -file "$1.csr"
  keytool -gencert -alias ca -keystore ca.p12 -storepass "$STORE_PASS" -infile "$1.csr" -outfile "$1.crt" \
    -rfc -validity "$DAYS" -ext "SAN=$2"
  keytool -importcert -noprompt -alias ca -file ca.pem -keystore "$1.p12" -storepass "$STORE_PASS"
  keytool -importcert -noprompt -alias "$1" -file "$1.crt" -keystore "$1.p12" -storepass "$STORE_PASS"
  rm -f "$1.csr" "$1.crt"
}
for n in 1 2 3; do issue "kafka-$n" "dns:kafka-$n,dns:localhost,ip:127.0.0.1"; done
issue admin "dns:admin"
# Read by the brokers through Kafka's FileConfigProvider, so no password sits in compose.yaml.
printf 'store.password=%s\n' "$STORE_PASS" > broker.properties
# The admin tools (kafka-configs, kafka-acls, health checks) speak mutual TLS on the internal listener.
cat > admin-ssl.properties <<PROPS
security.protocol=SSL
ssl.keystore.type=PKCS12
ssl.keystore.location=/secrets/admin.p12
ssl.keystore.password=$STORE_PASS
ssl.truststore.type=PKCS12
ssl.truststore.location=/secrets/truststore.p12
ssl.truststore.password=$STORE_PASS
PROPS
for who in admin service runner client; do principal "$who"; done
chmod 0600 ./*
# The brokers run as uid 1000 in the apache/kafka image; the Watchtower images run as root.
chown 1000:1000 kafka-*.p12 truststore.p12 broker.properties admin.p12 admin-ssl.properties ./*.password
chmod 0644 ca.pem
runner_volume
touch .done
echo "secrets generated"
