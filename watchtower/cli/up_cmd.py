"""`watchtower up|down`: the whole local stack (broker, stream workers, projections + API, and the
Stream Key Manager).

`up` starts what is missing and restarts what died, leaving live parts alone; `down` stops
everything `up` started (`watchtower status`, in `status_cmd`, checks every part; see
docs/local-stack.md). `up` also creates the deployment's genesis once (`watchtower.cli.genesis`:
CBY minter, protocol treasury, KEK), gives the stream workers ``WATCHTOWER_PROTOCOL_TREASURY``,
``WATCHTOWER_CBY_MINTER`` and ``WATCHTOWER_KEYMGR_PUBLIC_KEY``, starts the key manager with the KEK
file, and writes its URL as ``keymgr_url`` to ``config.json`` (docs/keymgr.md).

Clients' commands have a process of their own, the command gateway ``gateway-g1``, whose URL `up`
writes as ``commands_api`` to ``config.json``; the CLI and the SDK send commands there (the API
process takes them too). Its event loop then never waits for the projection's fold, which a burst of
ingested ticks keeps busy (docs/local-stack.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from watchtower.cli import settings
from watchtower.cli.genesis import ENV_KEYMGR_PUBLIC_KEY, ENV_RUNNER_REGISTRAR, Genesis, ensure_genesis
from watchtower.cli.runner_cmd import admit, runner_address
from watchtower.client.account import read_key_file
from watchtower.ingest.keys import ENV_INGEST_KEK_FILE
from watchtower.keymgr.kek import read_kek_file
from watchtower.local.config import ADMIN_PRINCIPAL, DEFAULT_CONTROLLER_PORT, DEFAULT_PORT
from watchtower.local.errors import LocalStackError
from watchtower.local.paths import watchtower_home
from watchtower.local.ports import port_bindable
from watchtower.local.security import CLIENT_PRINCIPAL, RUNNER_PRINCIPAL, SERVICE_PRINCIPAL, credentials_file
from watchtower.local.stack import KEYMGR_NAME, LOOPBACK, ServiceSet, is_loopback
from watchtower.local.supervisor import (
    ServiceRecord,
    StackRecord,
    next_free_ports,
    record_path,
    stop_services,
)
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import DEFAULT_PARTITIONS, catalogue, topic_prefix
from watchtower.topics.connection import ENV_CREDENTIALS, ENV_PRINCIPAL

DEFAULT_API_PORT = 8470
KEYMGR_PORT_OFFSET = 2  # the key manager listens on the first free port from --api-port + 2 (8472)
GATEWAY_PORT_OFFSET = 10  # the command gateway on the first free port from --api-port + 10 (8480, as compose)
GATEWAY_NAME = "gateway-g1"
_BROKER_OPTIONS = ("port", "controller_port", "partitions", "secure")
_SERVICE_OPTIONS = ("workers", "projections", "api_port", "bind")


@click.command("up")
@click.option("--port", default=DEFAULT_PORT, show_default=True, envvar="WATCHTOWER_LOCAL_PORT")
@click.option("--controller-port", default=DEFAULT_CONTROLLER_PORT, show_default=True,
              envvar="WATCHTOWER_LOCAL_CONTROLLER_PORT")
@click.option("--api-port", default=DEFAULT_API_PORT, show_default=True, envvar="WATCHTOWER_API_PORT",
              help="HTTP port of the first projection worker.")
@click.option("--workers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Stream-actor workers (they share the command partitions).")
@click.option("--projections", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Projection/API workers (they share the partitions); the first serves on --api-port, "
                   "the others on the next free ports.")
@click.option("--partitions", type=click.IntRange(1, 256), default=DEFAULT_PARTITIONS, show_default=True)
@click.option("--bind", default=LOOPBACK, show_default=True, envvar="WATCHTOWER_WEB_BIND",
              help="Address the HTTP API listens on. Anything but loopback makes it reachable from the network.")
@click.option("--secure", is_flag=True, default=False,
              help="Run the broker with SASL/SCRAM-SHA-512 and ACLs; the services connect as the service "
                   "principal, the ingestion runners as the runner principal; credentials are written 0600 "
                   "under WATCHTOWER_HOME (docs/security.md).")
@click.pass_context
def up(ctx: click.Context, **options: Any) -> None:
    """Start the embedded Kafka, create the topics, and run the workers and the HTTP API.

    On a stack that is already up, restart whatever died (broker, workers, projections) and
    leave the live parts alone.
    """
    explicit = {name for name in options
                if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}
    record = StackRecord.load()
    fresh = record is None
    record = _new_record(options) if record is None else _reconcile(record, options, explicit)
    _plan_keymgr(record)
    _plan_gateway(record)
    _plan_replay(record)
    _plan_delivery(record)
    _plan_ingest(record)
    if record.projections > record.partitions:
        raise LocalStackError(f"--projections {record.projections} is more than --partitions {record.partitions}; "
                              "each projection worker needs a partition")
    if not is_loopback(record.bind):
        click.echo(f"warning: the HTTP API listens on {record.bind}, so it is reachable from the network",
                   err=True)
    # Recorded before anything starts, so `watchtower down` stops whatever this command starts,
    # even if it fails half-way.
    record.save()
    broker = record.broker
    # A secure broker gets this deployment's ACLs right after it answers (idempotent on a running one).
    waited = broker.up(prefix=record.prefix)
    if not waited:
        broker.wait_reachable(timeout=30.0)
    restarted = ["kafka"] if waited and not fresh else []
    service_file = use_credentials(record)
    genesis = _use_genesis()
    ensure_topics(record.bootstrap, catalogue(record.prefix, partitions=record.partitions))
    log_dir = Path(record.log_dir)
    # The runners get a principal of their own: read tasks, write results, nothing else.
    runner_file = credentials_file(broker.spec, RUNNER_PRINCIPAL) if service_file is not None else None
    services = ServiceSet(record.bootstrap, record.prefix, log_dir, api_port=record.api_port, bind=record.bind,
                          credentials=service_file, runner_credentials=runner_file)
    for s in record.services.values():
        if s.alive():
            continue
        if s.kind == "worker":
            services.start_worker(s.worker_id)
        elif s.kind == "keymgr":
            services.start_keymgr(s.port or 0, genesis.kek_path, instance=s.worker_id)
        elif s.kind == "replay":
            services.start_replay(s.worker_id)
        elif s.kind == "delivery":
            services.start_delivery(s.worker_id)
        elif s.kind == "ingest":
            # Paid ingesting feeds are sealed by this stack's key manager; the publisher key it signs
            # with is wrapped under the ingestion KEK (ingest.keys).
            services.start_ingest({"WATCHTOWER_KEYMGR": _keymgr_url(services, record),
                                   ENV_INGEST_KEK_FILE: str(genesis.ingest_kek_path)})
        elif s.kind == "runner":
            services.start_runner(s.worker_id)
        elif s.kind == "gateway":
            services.start_gateway(s.worker_id, s.port or 0)
        else:
            services.start_projection(s.worker_id, port=s.port)
        s.attach(services.procs[s.name].pid)
        restarted.append(s.name)
    record.save()
    keymgr_url = _keymgr_url(services, record)
    commands_url = _url_of("gateway", services, record)
    settings.save({"bootstrap": record.bootstrap, "api": record.api_url, "commands_api": commands_url,
                   "keymgr_url": keymgr_url})
    if not fresh and not restarted:
        click.echo(f"already up: API {record.api_url}, kafka {record.bootstrap} "
                   f"(services: {', '.join(sorted(record.services))}); nothing to restart")
        return
    t0 = time.monotonic()
    _wait_ready(services, record)
    _admit_runners(record, genesis, [s for s in record.services.values() if s.kind == "runner" and s.name in restarted])
    if fresh:
        click.echo(f"kafka    {record.bootstrap} ({f'started in {waited:.1f}s' if waited else 'already running'}; "
                   f"{_security_note(record)})")
        if record.secure:
            click.echo(f"         client credentials: {credentials_file(broker.spec, CLIENT_PRINCIPAL)} "
                       "(export WATCHTOWER_KAFKA_CREDENTIALS=<that file>)")
        click.echo(f"workers  {record.workers} stream-actor worker(s), {record.projections} projection worker(s) "
                   f"(ready in {time.monotonic() - t0:.1f}s)")
    else:
        click.echo(f"restarted {', '.join(restarted)} (ready in {time.monotonic() - t0:.1f}s)")
    click.echo(f"api      {record.api_url}  (OpenAPI: {record.api_url}/openapi.json)")
    click.echo(f"commands {commands_url}  (the command gateway; the CLI sends commands there)")
    click.echo(f"keymgr   {keymgr_url}  (receipt key {genesis.keymgr_public_key.hex()})")
    for s in record.services.values():
        if s.kind == "projection" and s.port != record.api_port:
            click.echo(f"         {services.url_for(s.port or 0)}  ({s.name})")
    click.echo(f"logs     {log_dir}")


def _new_record(options: dict[str, Any]) -> StackRecord:
    bind, api_port = options["bind"], options["api_port"]
    # Checked before the broker starts: a busy API port would only show as a projection failing later.
    if not port_bindable(bind, api_port):
        raise LocalStackError(f"port {api_port} on {bind} is already in use; stop what holds it or pass --api-port")
    record = StackRecord(options["port"], options["controller_port"], topic_prefix(), options["partitions"],
                         api_port, bind, str(watchtower_home() / "stack" / "logs"), secure=options["secure"])
    record.plan(options["workers"], options["projections"])
    return record


def _reconcile(record: StackRecord, options: dict[str, Any], explicit: set[str]) -> StackRecord:
    """The recorded stack, with the service options given on this command line if they may change.

    Broker ports and partitions belong to the data on disk: they change only after `down`.
    Service options change only while no service process runs (e.g. after `down --keep-kafka`).
    """
    recorded = {"port": record.port, "controller_port": record.controller_port, "partitions": record.partitions,
                "secure": record.secure,
                "workers": record.workers, "projections": record.projections, "api_port": record.api_port,
                "bind": record.bind}
    changed = {name for name in explicit if options[name] != recorded[name]}
    if fixed := sorted(changed & set(_BROKER_OPTIONS)):
        name = fixed[0]
        setting = (f"{'with' if recorded[name] else 'without'} --secure" if name == "secure"
                   else f"with --{name.replace('_', '-')} {recorded[name]}")
        raise LocalStackError(f"the stack is up {setting}; run `watchtower down` first to change it")
    if changed & set(_SERVICE_OPTIONS):
        live = sorted(s.name for s in record.services.values() if s.alive())
        if live:
            name = sorted(changed)[0]
            raise LocalStackError(f"the stack runs with --{name.replace('_', '-')} {recorded[name]} "
                                  f"({', '.join(live)} running); run `watchtower down --keep-kafka` first to "
                                  "change it")
        record.api_port, record.bind = options["api_port"], options["bind"]
        record.plan(options["workers"], options["projections"])
    return record


def _plan_keymgr(record: StackRecord) -> None:
    """Add the key manager to the planned services (a record from before it existed gets one too)."""
    _plan_http_service(record, ServiceRecord(KEYMGR_NAME, "keymgr", "k1"), KEYMGR_PORT_OFFSET)


def _plan_gateway(record: StackRecord) -> None:
    """Add the command gateway to the planned services (a record from before it existed gets one too)."""
    _plan_http_service(record, ServiceRecord(GATEWAY_NAME, "gateway", "g1"), GATEWAY_PORT_OFFSET)


def _plan_http_service(record: StackRecord, service: ServiceRecord, offset: int) -> None:
    """Plan `service` (unless one of its kind is planned) on the first free port from --api-port + `offset`."""
    if any(s.kind == service.kind for s in record.services.values()):
        return
    avoid = {record.port, record.controller_port, *(s.port for s in record.services.values() if s.port)}
    (service.port,) = next_free_ports(record.api_port + offset, 1, record.bind, avoid)
    record.services[service.name] = service


def _url_of(kind: str, services: ServiceSet, record: StackRecord) -> str:
    """The URL of the planned service of `kind` (the key manager, the command gateway)."""
    port = next(s.port for s in record.services.values() if s.kind == kind)
    return services.url_for(port or 0)


def _plan_replay(record: StackRecord) -> None:
    """Add the replay worker to the planned services (a record from before it existed gets one too)."""
    if not any(s.kind == "replay" for s in record.services.values()):
        record.services["replay-r1"] = ServiceRecord("replay-r1", "replay", "r1")


def _plan_delivery(record: StackRecord) -> None:
    """Add the push delivery worker to the planned services (a record from before it existed gets one too)."""
    if not any(s.kind == "delivery" for s in record.services.values()):
        record.services["delivery-d1"] = ServiceRecord("delivery-d1", "delivery", "d1")


def _plan_ingest(record: StackRecord) -> None:
    """Add CIP-7 ingestion: the scheduler/aggregator service and two runners (docs/ingestion.md)."""
    from watchtower.ingest import keys

    keys.scheduler_key()  # created here once, before three processes race to create it
    # Wrapped under the deployment's ingestion KEK, as the key manager stores seeds (ingest.keys).
    keys.ingestion_publisher_key(kek=read_kek_file(ensure_genesis(watchtower_home()).ingest_kek_path))
    if "ingest" not in record.services:
        record.services["ingest"] = ServiceRecord("ingest", "ingest", "serve")
    for runner in ("r1", "r2"):
        record.services.setdefault(f"runner-{runner}", ServiceRecord(f"runner-{runner}", "runner", runner))


def _keymgr_url(services: ServiceSet, record: StackRecord) -> str:
    return _url_of("keymgr", services, record)


def _admit_runners(record: StackRecord, genesis: Genesis, runners: list[ServiceRecord]) -> None:
    """The genesis registrar admits the stack's runners it just started (the workers refuse a
    runner's own registration once WATCHTOWER_RUNNER_REGISTRAR names a registrar). An operator's
    own registrar (WATCHTOWER_RUNNER_REGISTRAR set to another address) admits them itself."""
    if not runners or os.environ.get(ENV_RUNNER_REGISTRAR) != genesis.registrar_address:
        return
    registrar = read_key_file(genesis.registrar_key_path)
    for s in runners:
        admit(record.api_url, registrar, runner_address(s.worker_id), s.worker_id)


def _use_genesis() -> Genesis:
    """The deployment's genesis, created on the first `up`; its public facts go to every worker.

    An operator's own WATCHTOWER_PROTOCOL_TREASURY / WATCHTOWER_CBY_MINTER win; the receipt key is
    always the one of this stack's KEK, or no worker could accept the key manager's ciphertext.
    """
    genesis = ensure_genesis(watchtower_home())
    for name, value in genesis.worker_env().items():
        if name == ENV_KEYMGR_PUBLIC_KEY:
            os.environ[name] = value
        else:
            os.environ.setdefault(name, value)
    return genesis


def use_credentials(record: StackRecord) -> Path | None:
    """Point this process's Kafka clients at the stack's broker; the service principal's file, if
    secure (the runners get the runner principal's instead, `ServiceSet.runner_credentials`).

    This command creates topics, so it connects as the admin of a secure broker. Credentials in the
    environment are for some other cluster: a plaintext stack must not send them.
    """
    if not record.secure:
        os.environ.pop(ENV_CREDENTIALS, None)
        return None
    spec = record.broker.spec
    os.environ[ENV_CREDENTIALS] = str(credentials_file(spec, ADMIN_PRINCIPAL))
    os.environ.pop(ENV_PRINCIPAL, None)
    return credentials_file(spec, SERVICE_PRINCIPAL)


def _security_note(record: StackRecord) -> str:
    if record.secure:
        return "secure: SASL/SCRAM-SHA-512 and ACLs, loopback only"
    return "plaintext, loopback only; use --secure for SASL/SCRAM and ACLs"


def _wait_ready(services: ServiceSet, record: StackRecord) -> None:
    """Wait until every projection and the command gateway answer ready; on failure stop what this
    command started."""
    try:
        for s in record.services.values():
            if s.kind in ("projection", "gateway"):
                services.wait_ready(api_url=services.url_for(s.port or 0))
        if services.keymgr_url is not None:  # started by this command
            services.wait_keymgr()
    except LocalStackError as exc:
        services.stop()
        raise LocalStackError(f"{exc}. The broker keeps running: `watchtower up` tries again, "
                              "`watchtower down` stops everything") from None


@click.command("down")
@click.option("--keep-kafka", is_flag=True, help="Stop the workers and the API but leave the broker running.")
def down(keep_kafka: bool) -> None:
    """Stop the workers, the HTTP API and (unless --keep-kafka) the embedded broker."""
    record = StackRecord.load()
    if record is None:
        click.echo("not up; nothing to stop")
        return
    stopped = stop_services(list(record.services.values()))
    click.echo(f"stopped {len(stopped)} service process(es)")
    if keep_kafka:
        # The broker stays recorded so a later `down` stops it and `up` starts the services again.
        for s in record.services.values():
            s.attach(None)
        record.save()
        click.echo(f"kafka kept running ({record.bootstrap}); `watchtower down` stops it")
        return
    record.broker.down()
    record_path().unlink(missing_ok=True)
    click.echo(f"kafka stopped ({record.bootstrap})")
