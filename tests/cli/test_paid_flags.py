"""Paid-feed CLI pieces that need no broker: `new feed --paid` flags, account names, the minter key."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from watchtower.cli.feed_config import stream_config_fields
from watchtower.cli.ledger_cmd import address_of
from watchtower.cli.main import _register, cli
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE, Account
from watchtower.protocol.errors import InvalidArgumentError

OWNER = "0x" + "ab" * 32
TREASURY = "0x" + "cd" * 32


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_ACCOUNT, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    _register()
    return tmp_path


def _opts(**given: object) -> dict[str, object]:
    names = ("ring_buffer_capacity", "max_subscribers", "max_push_deliveries_per_block", "max_push_cycles_per_block",
             "policy", "fee_per_epoch_cby", "protocol_fee_bps", "key_epoch_blocks", "min_purchase_epochs",
             "publisher_treasury", "content_cipher", "key_scope", "paid")
    return {"access_mode": "open", **dict.fromkeys(names), **given}


def test_paid_sets_every_paid_stream_config_field_but_the_protocol_treasury() -> None:
    config = stream_config_fields(OWNER, _opts(paid=True, fee_per_epoch_cby=1000, protocol_fee_bps=500,
                                                key_epoch_blocks=60, min_purchase_epochs=2, publisher_treasury=TREASURY,
                                                content_cipher="XCHACHA20_POLY1305", key_scope="ACCOUNT"))
    assert config == {"access_mode": "PLATFORM_MANAGED", "paid_stream_config": {
        "fee_per_key_epoch_cby": 1000, "protocol_fee_bps": 500, "publisher_treasury": TREASURY,
        "key_epoch_blocks": 60, "min_purchase_epochs": 2, "content_cipher": "XCHACHA20_POLY1305",
        "key_scope": "ACCOUNT"}}


def test_the_publisher_treasury_defaults_to_the_creator_and_the_alias_is_kept() -> None:
    config = stream_config_fields(OWNER, _opts(access_mode="subscriber-paid", fee_per_epoch_cby=5))
    assert config["access_mode"] == "SUBSCRIBER_PAID"
    assert config["paid_stream_config"] == {"fee_per_key_epoch_cby": 5, "protocol_fee_bps": 0,
                                            "publisher_treasury": OWNER}


def test_paid_flags_on_an_open_feed_and_a_paid_feed_without_a_fee_are_usage_errors() -> None:
    with pytest.raises(click.UsageError, match="--key-scope"):
        stream_config_fields(OWNER, _opts(key_scope="ACCOUNT"))
    with pytest.raises(click.UsageError, match="--fee-per-epoch-cby"):
        stream_config_fields(OWNER, _opts(paid=True))


def test_accounts_are_named_by_address_or_by_saved_name(home: Path) -> None:
    reader = Account.create("reader", home=home)
    actor = reader.create_actor("bot")
    assert address_of("reader", "TO") == reader.address
    assert address_of("bot", "TO") == actor.address
    assert address_of(TREASURY, "TO") == TREASURY
    with pytest.raises(InvalidArgumentError, match="account list"):
        address_of("nobody", "TO")


def test_mint_without_the_genesis_minter_key_says_where_it_comes_from(home: Path) -> None:
    result = CliRunner().invoke(cli, ["cby", "mint", TREASURY, "5", "--api", "http://127.0.0.1:9"])
    assert isinstance(result.exception, InvalidArgumentError)
    assert str(home / "genesis" / "minter.key") in result.exception.message
    assert "watchtower up" in result.exception.message


def test_every_paid_read_takes_json(home: Path) -> None:
    for args in (["account", "keys", "list"], ["cby", "balance"], ["cby", "supply"]):
        helped = CliRunner().invoke(cli, [*args, "--help"])
        assert "--json" in helped.output, args
    text = CliRunner().invoke(cli, ["feed", "1", "get-since", "--help"]).output
    assert "--decrypt" in text
