"""One place that turns a bootstrap address into Kafka client settings, with or without security.

Every Kafka client Watchtower builds (confluent-kafka producers, consumers and admin clients,
the Faust app, Spark's Kafka source and sink) takes its settings from here, so one environment
variable switches all of them between a plaintext and an authenticated broker:

- ``WATCHTOWER_KAFKA_CREDENTIALS`` unset or empty: plaintext, exactly ``{"bootstrap.servers": ...}``;
- set: the path of a credentials file (JSON, written 0600 by ``watchtower local up --secure``);
  ``WATCHTOWER_KAFKA_PRINCIPAL`` picks one of its principals, else the file's only principal,
  else ``client``.

The credentials file (documented in ``docs/security.md``)::

    {"version": 1,
     "principals": {"client": {"bootstrap": "127.0.0.1:9092", "security_protocol": "SASL_PLAINTEXT",
                               "sasl_mechanism": "SCRAM-SHA-512", "username": "client",
                               "password": "...", "ssl_ca_location": null}, ...}}

Each field maps 1:1 onto a Kafka client setting (see :data:`LIBRDKAFKA_KEYS`). The file's
``bootstrap`` is for tools that read the file alone (kcat, a Java consumer); :func:`kafka_config`
keeps the bootstrap its caller passes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_CREDENTIALS = "WATCHTOWER_KAFKA_CREDENTIALS"
ENV_PRINCIPAL = "WATCHTOWER_KAFKA_PRINCIPAL"
DEFAULT_PRINCIPAL = "client"
FILE_VERSION = 1
# Credentials-file field -> librdkafka (confluent-kafka, kcat) setting.
LIBRDKAFKA_KEYS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "username": "sasl.username",
    "password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location",
}
_REQUIRED = ("bootstrap", "security_protocol", "sasl_mechanism", "username", "password")


class CredentialsError(RuntimeError):
    """The credentials file named by the environment is missing, unreadable or incomplete."""


@dataclass(frozen=True)
class Principal:
    """One entry of a credentials file: who connects, how, and with which secret."""

    name: str
    bootstrap: str
    security_protocol: str
    sasl_mechanism: str
    username: str
    password: str
    ssl_ca_location: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"bootstrap": self.bootstrap, "security_protocol": self.security_protocol,
                "sasl_mechanism": self.sasl_mechanism, "username": self.username, "password": self.password,
                "ssl_ca_location": self.ssl_ca_location}

    def librdkafka(self) -> dict[str, str]:
        """The security settings for a confluent-kafka client (no bootstrap)."""
        cfg = {"security.protocol": self.security_protocol, "sasl.mechanism": self.sasl_mechanism,
               "sasl.username": self.username, "sasl.password": self.password}
        if self.ssl_ca_location:
            cfg["ssl.ca.location"] = self.ssl_ca_location
        return cfg

    def jaas_config(self) -> str:
        """The JAAS line a Java client (and Spark) needs for SCRAM."""
        user = self.username.replace("\\", "\\\\").replace('"', '\\"')
        secret = self.password.replace("\\", "\\\\").replace('"', '\\"')
        return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{secret}";')


def write_credentials(path: Path, principals: list[Principal]) -> Path:
    """Write ``principals`` to ``path`` as a credentials file, readable by its owner only (0600).

    The file is created 0600 before any secret is written, so it is never readable by others,
    not even for a moment; an existing file is replaced atomically.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = {"version": FILE_VERSION, "principals": {p.name: p.as_json() for p in principals}}
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(body, indent=2) + "\n")
    os.chmod(tmp, 0o600)  # whatever the umask was
    tmp.replace(path)
    return path


def read_credentials(path: Path) -> dict[str, Principal]:
    """Every principal in the credentials file at ``path``; :class:`CredentialsError` when unusable."""
    try:
        body = json.loads(Path(path).read_text())
        entries = body["principals"]
        found = {name: Principal(name, **{k: entry.get(k) for k in (*_REQUIRED, "ssl_ca_location")})
                 for name, entry in entries.items() if all(entry.get(k) for k in _REQUIRED)}
        if not found:
            raise ValueError(f"no complete principal (fields {', '.join(_REQUIRED)})")
        return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CredentialsError(
            f"the Kafka credentials file {path} cannot be used ({exc}); point {ENV_CREDENTIALS} at the file "
            "`watchtower local up --secure` wrote, or unset it for a plaintext broker"
        ) from None


def credentials_path() -> Path | None:
    """The credentials file the environment names, or ``None`` for plaintext."""
    value = os.environ.get(ENV_CREDENTIALS, "").strip()
    return Path(value) if value else None


def current_principal() -> Principal | None:
    """The principal this process connects as, or ``None`` when the broker is plaintext."""
    path = credentials_path()
    if path is None:
        return None
    principals = read_credentials(path)
    wanted = os.environ.get(ENV_PRINCIPAL, "").strip()
    if not wanted:
        wanted = next(iter(principals)) if len(principals) == 1 else DEFAULT_PRINCIPAL
    if wanted not in principals:
        raise CredentialsError(
            f"the Kafka credentials file {path} has no principal {wanted!r} (it has {', '.join(sorted(principals))}); "
            f"set {ENV_PRINCIPAL} to one of those"
        )
    return principals[wanted]


def kafka_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """``{"bootstrap.servers": bootstrap, **security settings from the environment, **extra}``.

    Pass librdkafka settings with dots as a dict splat: ``kafka_config(b, **{"group.id": g})``.
    """
    principal = current_principal()
    security = principal.librdkafka() if principal is not None else {}
    return {"bootstrap.servers": bootstrap, **security, **extra}


ENV_SESSION_TIMEOUT = "WATCHTOWER_SESSION_TIMEOUT_MS"
DEFAULT_SESSION_TIMEOUT_MS = 10_000
# Kafka's own floor for group.min.session.timeout.ms is not ours to lower on a real cluster; a value
# below the broker's group.min.session.timeout.ms is refused by the broker with a clear error.
MIN_SESSION_TIMEOUT_MS = 1_000


@dataclass(frozen=True)
class GroupTimeouts:
    """How fast a group notices a dead member: its session timeout and heartbeat interval.

    A worker killed with ``kill -9`` keeps its partitions until the session times out; the next
    member takes them over then. ``WATCHTOWER_SESSION_TIMEOUT_MS`` (default 10,000) sets it for
    every group member Watchtower runs; it must lie within the broker's
    ``group.min.session.timeout.ms``/``group.max.session.timeout.ms`` (Kafka's defaults 6 s and 30 min;
    the embedded test broker lowers the minimum). The heartbeat is a third of it, at most 1 s.
    """

    session_ms: int
    heartbeat_ms: int

    @classmethod
    def from_env(cls) -> GroupTimeouts:
        raw = os.environ.get(ENV_SESSION_TIMEOUT, "").strip()
        if not raw:
            session = DEFAULT_SESSION_TIMEOUT_MS
        elif not raw.isdigit() or int(raw) < MIN_SESSION_TIMEOUT_MS:
            raise ValueError(f"{ENV_SESSION_TIMEOUT} must be a whole number of milliseconds ≥ "
                             f"{MIN_SESSION_TIMEOUT_MS}, got {raw!r}")
        else:
            session = int(raw)
        return cls(session, max(100, min(1_000, session // 3)))


def spark_kafka_options(bootstrap: str) -> dict[str, str]:
    """Options for Spark's Kafka source and sink: ``kafka.bootstrap.servers`` and the security ones."""
    options = {"kafka.bootstrap.servers": bootstrap}
    principal = current_principal()
    if principal is None:
        return options
    options.update({"kafka.security.protocol": principal.security_protocol,
                    "kafka.sasl.mechanism": principal.sasl_mechanism,
                    "kafka.sasl.jaas.config": principal.jaas_config()})
    if principal.ssl_ca_location:
        # Kafka's Java client takes a PEM CA bundle as a trust store. Its certificates travel in the
        # options, not as a path: the executors of a Spark cluster run on other hosts, which have
        # no copy of the driver's file (and need none of its secrets).
        options.update({"kafka.ssl.truststore.type": "PEM",
                        "kafka.ssl.truststore.certificates": Path(principal.ssl_ca_location).read_text()})
    return options
