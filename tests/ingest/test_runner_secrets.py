"""A runner resolves the secrets a task definition names, from the files it holds; the value is on
the wire to the source and nowhere else (not in the task, not in a result's detail)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.ingest.test_runner_fetch import LOOPBACK, RUNNER_KEY, SCHEDULER, answer, local_source, read_request, task_for
from watchtower.ingest.runner import Runner
from watchtower.ingest.secrets import SecretStore
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.ingestion import IngestReason
from watchtower.schemas.ingest_records import encode_task

VALUE = "Bearer 7f3a-not-public"


def secrets_dir(tmp_path: Path, mode: int = 0o600) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o700)
    path = directory / "btc-api"
    path.write_text(VALUE + "\n")
    path.chmod(mode)
    return directory


def runner(directory: Path | None) -> Runner:
    return Runner(RUNNER_KEY, address_from_public_key(bytes(SCHEDULER.verify_key)), allow=LOOPBACK,
                  secrets=SecretStore(directory))


def test_the_request_carries_the_resolved_secret_and_the_task_only_its_name(tmp_path: Path) -> None:
    seen: list[bytes] = []
    with local_source(answer(b'{"p": 1}', seen)) as source:
        task = task_for("paid-api", source.url, headers={"Authorization": {"secret": "btc-api"}})
        result = runner(secrets_dir(tmp_path)).run_task(task)
    assert result.error is None
    assert result.result_json == '{"p":1}'
    [request] = seen
    assert f"\r\nAuthorization: {VALUE}\r\n".encode() in request
    assert VALUE.encode() not in encode_task(task)  # what ingest.tasks and the stream's config hold
    assert b"btc-api" in encode_task(task)


def test_a_secret_the_runner_does_not_hold_is_source_unavailable_naming_it(tmp_path: Path) -> None:
    with local_source(answer(b'{"p": 1}')) as source:
        task = task_for("paid-api", source.url, headers={"Authorization": {"secret": "eth-api"}})
        missing = runner(secrets_dir(tmp_path)).run_task(task)
        none_held = runner(None).run_task(task)
    for result in (missing, none_held):
        assert result.error == IngestReason.SOURCE_UNAVAILABLE
        assert "'eth-api'" in result.detail


def test_a_secret_file_others_can_read_is_refused_and_its_value_never_told(tmp_path: Path) -> None:
    with local_source(answer(b'{"p": 1}')) as source:
        task = task_for("paid-api", source.url, headers={"X-Api-Key": {"secret": "btc-api"}})
        result = runner(secrets_dir(tmp_path, mode=0o644)).run_task(task)
    assert result.error == IngestReason.SOURCE_UNAVAILABLE
    assert "'btc-api'" in result.detail
    assert "chmod 600" in result.detail
    assert VALUE not in result.detail


def test_a_redirect_to_another_origin_does_not_carry_the_secret(tmp_path: Path) -> None:
    seen: list[bytes] = []
    with local_source(answer(b'{"p": 2}', seen)) as target:

        def redirect(conn: socket.socket, _stop: threading.Event) -> None:
            read_request(conn)
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % target.url.encode())

        with local_source(redirect) as source:
            task = task_for("paid-api", source.url, headers={"Authorization": {"secret": "btc-api"}, "Accept": "x"})
            result = runner(secrets_dir(tmp_path)).run_task(task)
    assert result.result_json == '{"p":2}'
    [request] = seen
    assert VALUE.encode() not in request
    assert b"accept: x" in request.lower()


def test_the_runner_reads_its_secrets_directory_from_the_environment(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_INGEST_SECRETS_DIR", str(secrets_dir(tmp_path)))
    held = Runner(RUNNER_KEY, address_from_public_key(bytes(SCHEDULER.verify_key)))
    assert held.secrets.get("btc-api") == VALUE


def test_a_task_from_an_older_config_with_a_literal_credential_is_answered_with_the_fix() -> None:
    task = task_for("old-feed", "http://127.0.0.1:9/p", headers={"Authorization": "Bearer old-and-public"})
    result = runner(None).run_task(task)
    assert result.error == IngestReason.SOURCE_UNAVAILABLE
    assert '{"secret": "NAME"}' in result.detail
    assert "old-and-public" not in result.detail
