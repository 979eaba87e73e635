"""Spark's Kafka options carry everything an executor needs to connect, not paths to the driver's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchtower.topics.connection import (
    ENV_CREDENTIALS,
    ENV_PRINCIPAL,
    Principal,
    spark_kafka_options,
    write_credentials,
)

PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def test_the_ca_travels_in_the_options_so_executors_elsewhere_need_no_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    creds = write_credentials(tmp_path / "client.json", [Principal(
        "client", bootstrap="kafka-1:19092", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
        username="client", password="pw-from-the-test", ssl_ca_location=str(ca))])
    monkeypatch.setenv(ENV_CREDENTIALS, str(creds))
    monkeypatch.delenv(ENV_PRINCIPAL, raising=False)
    options = spark_kafka_options("kafka-1:19092")
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"] == PEM
    assert not any(value == str(ca) for value in options.values())  # no path only the driver has


def test_plaintext_is_the_bootstrap_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    assert spark_kafka_options("127.0.0.1:9092") == {"kafka.bootstrap.servers": "127.0.0.1:9092"}
