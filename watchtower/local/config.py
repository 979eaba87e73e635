"""Broker configuration for the embedded KRaft cluster (1 node by default, 3 for reliability tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 19092
HOST = "127.0.0.1"
# Secure mode: clients and brokers authenticate with SCRAM on the client listener.
SCRAM_MECHANISM = "SCRAM-SHA-512"
SECURE_LISTENER = "SASL_PLAINTEXT"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_PRINCIPAL = "admin"


#: Kafka's default ``broker.session.timeout.ms``, written out so a supervisor knows how long the
#: controller keeps a killed broker's registration alive.
BROKER_SESSION_TIMEOUT_MS = 9_000
COMBINED_ROLES = "broker,controller"


@dataclass(frozen=True)
class NodeSpec:
    """One KRaft node: broker and controller in the same JVM (the default), or one of the two."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    roles: str = COMBINED_ROLES

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles.split(",")

    @property
    def log_dirs(self) -> Path:
        return self.directory / "data"

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log4j_file(self) -> Path:
        return self.directory / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    @property
    def gc_log_file(self) -> Path:
        """The JVM's garbage-collector log: one line per pause, with its wall-clock time (Kafka's own
        start scripts keep one too), to set a latency stall beside the broker's pauses."""
        return self.directory / "gc.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "broker.pid"


@dataclass(frozen=True)
class ClusterSpec:
    """The whole local cluster: where it lives and which ports its nodes use.

    Node *i* (1-based) listens on ``port + i - 1`` for clients and
    ``controller_port + i - 1`` for the KRaft quorum.
    """

    data_dir: Path
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    nodes: int = 1
    heap_mb: int = 768
    # SASL/SCRAM-SHA-512 on the client listener, the standard authorizer and ACLs (docs/security.md).
    secure: bool = False
    # The broker's group.min.session.timeout.ms (None: Kafka's default, 6 s). The embedded broker
    # lowers the floor so that a deployment (and the test suite, WATCHTOWER_SESSION_TIMEOUT_MS) may
    # choose a session timeout of a few seconds: a worker killed with kill -9 then loses its
    # partitions in seconds. The floor changes nothing for a client that does not ask for less.
    min_session_timeout_ms: int | None = 1_000
    # Opt-in broker metrics: node *i* serves its JMX MBeans as JSON over HTTP (the Jolokia JVM
    # agent) on ``HOST:metrics_port + i - 1``. None (the default): no agent, nothing else changes.
    metrics_port: int | None = None
    # One controller in a JVM of its own (node id ``nodes + 1``, on ``controller_port + nodes``),
    # and brokers that are only brokers: the layout of a production cluster. A broker restarted
    # after ``kill -9`` is then never its own only controller, which would replay its old
    # registration and serve from it until that registration's session expires (plaintext only).
    dedicated_controller: bool = False

    @property
    def credentials_dir(self) -> Path:
        """Where a secure cluster keeps its credentials files (all 0600)."""
        return self.data_dir / "credentials"

    @property
    def node_specs(self) -> list[NodeSpec]:
        """The broker nodes (combined broker-controllers unless ``dedicated_controller``)."""
        roles = "broker" if self.dedicated_controller else COMBINED_ROLES
        return [
            NodeSpec(i, self.port + i - 1, self.controller_port + i - 1, self.data_dir / f"node-{i}", roles)
            for i in range(1, self.nodes + 1)
        ]

    @property
    def controller_specs(self) -> list[NodeSpec]:
        """The dedicated controller node, when there is one (its client ``port`` is never opened)."""
        if not self.dedicated_controller:
            return []
        n = self.nodes + 1
        return [NodeSpec(n, self.port + n - 1, self.controller_port + n - 1, self.data_dir / "controller",
                         "controller")]

    @property
    def all_node_specs(self) -> list[NodeSpec]:
        """Every node this cluster runs: its controllers first, then its brokers."""
        return [*self.controller_specs, *self.node_specs]

    def metrics_url(self, node: NodeSpec) -> str | None:
        """The Jolokia base URL of ``node`` (ends in ``/jolokia/``), or None without metrics."""
        if self.metrics_port is None:
            return None
        return f"http://{HOST}:{self.metrics_port + node.node_id - 1}/jolokia/"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.node_specs)

    @property
    def replication_factor(self) -> int:
        return min(3, self.nodes)

    @property
    def min_insync_replicas(self) -> int:
        return 2 if self.nodes >= 3 else 1

    def server_properties(self, node: NodeSpec, admin_password: str | None = None) -> str:
        """The ``server.properties`` text for ``node`` (a secure spec needs the admin password)."""
        if self.dedicated_controller and self.secure:
            raise ValueError("a dedicated controller is supported on plaintext clusters only")
        quorum = self.controller_specs or self.node_specs
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in quorum)
        rf = self.replication_factor
        if node.roles == "controller":
            listeners = f"CONTROLLER://{HOST}:{node.controller_port}"
        elif node.roles == "broker":
            listeners = f"PLAINTEXT://{HOST}:{node.port}"
        else:
            listeners = f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}"
        props = {
            "process.roles": node.roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            **({"advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
                "inter.broker.listener.name": "PLAINTEXT"} if node.is_broker else {}),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.log_dirs),
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(self.min_insync_replicas),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(self.min_insync_replicas),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(self.min_insync_replicas),
            # Tests and the demo start consumers right after the broker; do not wait 3 s to rebalance.
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created explicitly by `watchtower init` with their catalogue settings;
            # auto-creation would silently make them with the wrong partitions and retention.
            "auto.create.topics.enable": "false",
            "log.retention.check.interval.ms": "60000",
            "unclean.leader.election.enable": "false",
        }
        if self.dedicated_controller:
            props["broker.session.timeout.ms"] = str(BROKER_SESSION_TIMEOUT_MS)
        if self.min_session_timeout_ms is not None:
            props["group.min.session.timeout.ms"] = str(self.min_session_timeout_ms)
        if self.secure:
            if not admin_password:
                raise ValueError("a secure cluster needs the admin password to write its broker config")
            props.update(secure_properties(node, admin_password))
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def log4j_properties(self, node: NodeSpec) -> str:
        """A log4j2 config writing a rolling ``broker.log`` in the node directory."""
        return f"""status = warn
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {node.log_file}
appender.file.filePattern = {node.log_file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def secure_properties(node: NodeSpec, admin_password: str) -> dict[str, str]:
    """What secure mode changes in ``server.properties``.

    Clients and brokers (inter-broker) speak SASL_PLAINTEXT with SCRAM-SHA-512 on loopback; the
    broker's own SCRAM identity is the admin principal, a super user. The controller listener
    authenticates too, with SASL/PLAIN: KRaft cannot use SCRAM there (SCRAM credentials live in the
    metadata log the controllers serve, so a controller could not check them before it has the
    log), and a PLAINTEXT controller listener would need ``User:ANONYMOUS`` as a super user, which
    would let any local process that reaches the controller port act as one (KIP-919 lets admin
    clients talk to controllers). Its one PLAIN user is the admin, with the same random password.
    """
    scram = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
             f'username="{ADMIN_PRINCIPAL}" password="{admin_password}";')
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
             f'username="{ADMIN_PRINCIPAL}" password="{admin_password}" user_{ADMIN_PRINCIPAL}="{admin_password}";')
    return {
        "listeners": f"{SECURE_LISTENER}://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"{SECURE_LISTENER}://{HOST}:{node.port}",
        "inter.broker.listener.name": SECURE_LISTENER,
        "listener.security.protocol.map": f"{SECURE_LISTENER}:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        f"listener.name.{SECURE_LISTENER.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": scram,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{ADMIN_PRINCIPAL}",
        # Deny by default: a resource nobody granted is closed, not open.
        "allow.everyone.if.no.acl.found": "false",
    }
