"""The account instance: account keys, actor authorizations, transfers and burns (pure rules)."""

from __future__ import annotations

import contextlib
import dataclasses

import nacl.signing
import pytest
from ledger_world import ALICE, BOB, SID, World, addr

from watchtower.protocol.errors import MalformedRecordError, WatchtowerError
from watchtower.protocol.events import EventBody, FeedRegistered
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.common import MAX_CBY, account_instance
from watchtower.protocol.ledger.events import (
    AccountKeyRegistered,
    AccountKeyRevoked,
    ActorAuthorizationGranted,
    ActorAuthorizationRevoked,
    CbyCredited,
    CbyDebited,
)

X_KEY = bytes(range(1, 33))


def code(answer: dict) -> str:
    assert not answer["ok"], answer
    err = answer["error"]
    assert isinstance(err, WatchtowerError)
    assert err.message
    return err.code


def register(world: World, body: dict | None = None, signer=ALICE, instance: str | None = None) -> dict:
    body = {"scheme": "X25519", "public_key": X_KEY} if body is None else body
    return world.send(world.sign(signer, "register_account_key", instance or account_instance(addr(signer)), body))


def test_register_account_key_assigns_ids_from_one_and_records_the_key() -> None:
    world = World()
    first, second = register(world), register(world, {"scheme": "X25519", "public_key": b"\x09" * 32})
    assert (first["result"]["account_key_id"], second["result"]["account_key_id"]) == (1, 2)
    keys = world.view().account_keys(addr(ALICE))
    assert [(k.account_key_id, k.public_key, k.active) for k in keys] == [(1, X_KEY, True), (2, b"\x09" * 32, True)]


@pytest.mark.parametrize("body", [
    {"scheme": "ED25519", "public_key": X_KEY},
    {"scheme": "x25519", "public_key": X_KEY},
    {"scheme": "X25519", "public_key": X_KEY[:31]},
    {"scheme": "X25519", "public_key": X_KEY + b"\x01"},
    {"scheme": "X25519", "public_key": bytes(32)},
    {"scheme": "X25519", "public_key": X_KEY.hex()},
])
def test_only_a_32_byte_nonzero_x25519_key_is_accepted(body: dict) -> None:
    assert code(register(World(), body)) == "INVALID_ACCOUNT_KEY"


def test_the_ninth_active_key_is_refused_until_one_is_revoked() -> None:
    world = World()
    for i in range(8):
        assert register(world, {"scheme": "X25519", "public_key": bytes([i + 1]) * 32})["ok"]
    assert code(register(world)) == "ACCOUNT_KEY_LIMIT_REACHED"
    revoke = world.sign(ALICE, "revoke_account_key", account_instance(addr(ALICE)), {"account_key_id": 3})
    assert world.send(revoke)["result"]["status"] == "REVOKED"
    assert register(world)["result"]["account_key_id"] == 9  # ids never reused


def test_revoking_twice_is_key_revoked_and_an_unknown_id_unauthorized() -> None:
    """CIP-7 lists UNAUTHORIZED and KEY_REVOKED for revoke_account_key (failed before: INVALID_ACCOUNT_KEY)."""
    world = World()
    register(world)
    sign = lambda kid: world.sign(ALICE, "revoke_account_key", account_instance(addr(ALICE)),  # noqa: E731
                                  {"account_key_id": kid})
    assert world.send(sign(1))["ok"]
    assert code(world.send(sign(1))) == "KEY_REVOKED"
    unknown = world.send(sign(7))
    assert code(unknown) == "UNAUTHORIZED"
    assert unknown["error"].details == {"account_key_id": 7}


def test_an_account_method_sent_to_another_account_is_unauthorized() -> None:
    world = World()
    assert code(register(world, instance=account_instance(addr(BOB)))) == "UNAUTHORIZED"
    grant = world.sign(ALICE, "authorize_actor", account_instance(addr(BOB)), {"actor": addr(ALICE), "stream_id": SID})
    assert code(world.send(grant, account_instance(addr(BOB)))) == "UNAUTHORIZED"


def test_a_forged_signature_is_invalid_signature() -> None:
    world = World()
    cmd = world.sign(ALICE, "register_account_key", account_instance(addr(ALICE)),
                     {"scheme": "X25519", "public_key": X_KEY})
    forged = dataclasses.replace(cmd, signature=bytes(64))
    assert code(world.send(forged)) == "INVALID_SIGNATURE"


def actor(n: int) -> str:
    """The address of the n-th actor: a real key pair's (an authorized actor must exist)."""
    return addr(nacl.signing.SigningKey(n.to_bytes(32, "big")))


def test_the_sixty_fifth_authorization_on_a_stream_is_refused_but_another_stream_is_fine() -> None:
    world = World()
    acct = account_instance(addr(ALICE))
    for n in range(1, 65):
        assert world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": actor(n), "stream_id": SID}))["ok"]
    refused = world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": actor(65), "stream_id": SID}))
    assert code(refused) == "AUTHORIZATION_LIMIT_REACHED"
    assert world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": actor(65), "stream_id": "other"}))["ok"]
    # a revocation frees a slot; re-granting an ACTIVE one does not take another
    assert world.send(world.sign(ALICE, "revoke_actor", acct, {"actor": actor(1), "stream_id": SID}))["ok"]
    assert world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": actor(2), "stream_id": SID}))["ok"]
    assert world.send(world.sign(ALICE, "authorize_actor", acct, {"actor": actor(65), "stream_id": SID}))["ok"]
    view = world.view()
    assert view.actor_authorized(addr(ALICE), actor(65), SID)
    assert not view.actor_authorized(addr(ALICE), actor(1), SID)


def test_revoking_an_actor_without_a_grant_is_unauthorized() -> None:
    """CIP-7 lists UNAUTHORIZED for revoke_actor (failed before: INVALID_ARGUMENT)."""
    world = World()
    cmd = world.sign(ALICE, "revoke_actor", account_instance(addr(ALICE)), {"actor": actor(1), "stream_id": SID})
    answer = world.send(cmd)
    assert code(answer) == "UNAUTHORIZED"
    assert answer["error"].details == {"actor": actor(1), "stream_id": SID}


def transfer(world: World, amount: object, to: str | None = None, signer=ALICE) -> dict:
    return world.send(world.sign(signer, "transfer_cby", account_instance(addr(signer)),
                                 {"to": to or addr(BOB), "amount_cby": amount}))


def test_a_transfer_debits_the_sender_and_credits_the_receiver_exactly_once() -> None:
    world = World()
    world.mint(ALICE, 100)
    answer = transfer(world, 40)
    assert answer["result"]["balance_cby"] == 60
    assert (world.balance(ALICE), world.balance(BOB)) == (60, 40)
    kinds = [(e.type, e.body.reason if isinstance(e.body, CbyCredited | CbyDebited) else None) for e in world.events]
    assert kinds == [("CbyMinted", None), ("CbyCredited", "mint"), ("CbyDebited", "transfer"),
                     ("CbyCredited", "transfer")]


@pytest.mark.parametrize("amount", [0, -1, True, 1.0, "5", MAX_CBY + 1, None])
def test_amounts_outside_one_to_two_to_the_63_minus_one_are_invalid_argument(amount: object) -> None:
    world = World()
    world.mint(ALICE, 100)
    assert code(transfer(world, amount)) == "INVALID_ARGUMENT"
    assert world.balance(ALICE) == 100


def test_overspending_is_insufficient_cby_balance_with_details_and_changes_nothing() -> None:
    world = World()
    world.mint(ALICE, 10)
    answer = transfer(world, 11)
    assert code(answer) == "INSUFFICIENT_CBY_BALANCE"
    assert answer["error"].details["balance_cby"] == "10"
    burn = world.send(world.sign(ALICE, "burn_cby", account_instance(addr(ALICE)), {"amount_cby": 11}))
    assert code(burn) == "INSUFFICIENT_CBY_BALANCE"
    assert (world.balance(ALICE), world.balance(BOB)) == (10, 0)


def test_an_exact_retry_is_idempotent_and_a_reused_nonce_is_nonce_replayed() -> None:
    world = World()
    world.mint(ALICE, 100)
    cmd = world.sign(ALICE, "transfer_cby", account_instance(addr(ALICE)), {"to": addr(BOB), "amount_cby": 5})
    first, again = world.send(cmd), world.send(cmd)
    assert again["result"] == {**first["result"], "duplicate": True}
    assert world.balance(BOB) == 5
    other = dataclasses.replace(world.sign(ALICE, "transfer_cby", account_instance(addr(ALICE)),
                                           {"to": addr(BOB), "amount_cby": 6}))
    from watchtower.protocol.signed_command import sign_command
    replayed = sign_command(ALICE, "transfer_cby", account_instance(addr(ALICE)), cmd.nonce, dict(other.body))
    assert code(world.send(replayed)) == "NONCE_REPLAYED"


def test_a_transfer_to_oneself_or_to_a_non_address_is_invalid_argument() -> None:
    world = World()
    world.mint(ALICE, 100)
    assert code(transfer(world, 1, to=addr(ALICE))) == "INVALID_ARGUMENT"
    assert code(transfer(world, 1, to="bob")) == "INVALID_ARGUMENT"


@pytest.mark.parametrize("to", ["0x" + "00" * 32, "0x" + (1).to_bytes(32, "little").hex(), "0x" + "ab" * 32,
                                "0x" + "ff" * 32])
def test_a_transfer_to_an_address_no_key_pair_holds_is_invalid_argument_and_moves_nothing(to: str) -> None:
    """Failed before the fix: the zero address (and any 32 bytes) took the CBY, which no one could ever spend."""
    world = World()
    world.mint(ALICE, 100)
    answer = transfer(world, 40, to=to)
    assert code(answer) == "INVALID_ARGUMENT"
    assert "could never be spent" in answer["error"].message
    assert answer["error"].details == {"to": to}
    assert (world.balance(ALICE), world.balance(to)) == (100, 0)
    assert [e.type for e in world.events] == ["CbyMinted", "CbyCredited"]  # nothing of the transfer was written
    assert transfer(world, 40)["ok"]  # a real key pair's address still takes it


def test_burn_debits_the_holder_and_lowers_the_supply() -> None:
    world = World()
    world.mint(ALICE, 100)
    assert world.send(world.sign(ALICE, "burn_cby", account_instance(addr(ALICE)), {"amount_cby": 30}))["ok"]
    assert (world.balance(ALICE), world.supply.total_supply_cby) == (70, 70)


# --- evolve refuses forged records ---------------------------------------------------------------


def forged(world: World, body: EventBody) -> None:
    state = world.accounts.get(account_instance(addr(ALICE))) or AccountState.initial(account_instance(addr(ALICE)))
    template = next(e for e in world.events if e.stream_id == account_instance(addr(ALICE)))
    event = dataclasses.replace(template, body=body)
    with pytest.raises(MalformedRecordError):
        evolve_account(state, event)


def test_evolve_refuses_a_debit_below_zero_a_bad_credit_and_key_ids_out_of_order() -> None:
    world = World()
    world.mint(ALICE, 10)
    a = addr(ALICE)
    move = {"account": a, "ref": "r", "counterparty": ""}
    forged(world, CbyDebited(**move, amount_cby=11, reason="transfer"))
    forged(world, CbyCredited(**move, amount_cby=-5, reason="mint"))
    forged(world, CbyCredited(**move, amount_cby=MAX_CBY, reason="mint"))  # overflows the balance
    forged(world, CbyCredited(**move, amount_cby=5, reason="gift"))
    forged(world, CbyCredited(**{**move, "account": addr(BOB)}, amount_cby=5, reason="mint"))
    forged(world, AccountKeyRegistered(account=a, account_key_id=2, scheme="X25519", public_key=X_KEY))
    forged(world, AccountKeyRevoked(account=a, account_key_id=1))
    forged(world, ActorAuthorizationRevoked(account=a, actor=actor(1), stream_id=SID))
    forged(world, FeedRegistered(feed_id=1, stream_id=SID, owner=a, name="n", description=""))


# --- CIP-7 ActorAuthorization: scope, own actors, existence ----------------------------------------


def grant(world: World, body: dict, signer=ALICE) -> dict:
    return world.send(world.sign(signer, "authorize_actor", account_instance(addr(signer)), body))


def revoke(world: World, body: dict, signer=ALICE) -> dict:
    return world.send(world.sign(signer, "revoke_actor", account_instance(addr(signer)), body))


def test_the_grant_schema_and_class_name_the_scope_stream_decrypt() -> None:
    """Failed before the fix: the schema's doc and the class docstring still said DECRYPT."""
    import json
    from pathlib import Path

    import watchtower.schemas

    schema = json.loads((Path(watchtower.schemas.__file__).parent / "ActorAuthorizationGranted.v1.avsc").read_text())
    scope_doc = next(f["doc"] for f in schema["fields"] if f["name"] == "scope")
    assert scope_doc.startswith("STREAM_DECRYPT")
    assert "scope STREAM_DECRYPT" in (ActorAuthorizationGranted.__doc__ or "")


def test_a_grant_records_the_spec_scope_stream_decrypt_and_the_legacy_scope_still_folds() -> None:
    """Failed before the fix: the reply and the event said DECRYPT, and a STREAM_DECRYPT event was refused."""
    world = World()
    answer = grant(world, {"actor": actor(1), "stream_id": SID})
    assert answer["result"]["scope"] == "STREAM_DECRYPT"
    event = world.events[-1]
    assert isinstance(event.body, ActorAuthorizationGranted)
    assert event.body.scope == "STREAM_DECRYPT"
    state = AccountState.initial(account_instance(addr(ALICE)))
    for scope, who in (("STREAM_DECRYPT", actor(2)), ("DECRYPT", actor(3))):  # another implementation; an old record
        body = dataclasses.replace(event.body, actor=who, scope=scope)
        state = evolve_account(state, dataclasses.replace(event, body=body))
        assert state.actor_authorized(who, SID)
    with pytest.raises(MalformedRecordError):
        evolve_account(state, dataclasses.replace(event, body=dataclasses.replace(event.body, actor=actor(4),
                                                                                   scope="ALL")))


def test_an_accounts_own_actor_is_authorized_on_every_stream_until_revoked_there() -> None:
    """Failed before the fix: no actor was ever authorized without a grant on the stream."""
    world = World()
    assert not world.view().actor_authorized(addr(ALICE), actor(1), "s1")
    assert grant(world, {"actor": actor(1), "all_streams": True})["ok"]
    view = world.view()
    assert view.actor_authorized(addr(ALICE), actor(1), "s1")
    assert view.actor_authorized(addr(ALICE), actor(1), "any-other-stream")
    assert not view.actor_authorized(addr(BOB), actor(1), "s1")  # Alice's actor, not Bob's
    assert revoke(world, {"actor": actor(1), "stream_id": "s1"})["ok"]  # explicitly revoked on one stream
    view = world.view()
    assert not view.actor_authorized(addr(ALICE), actor(1), "s1")
    assert view.actor_authorized(addr(ALICE), actor(1), "s2")
    assert code(revoke(world, {"actor": actor(1), "stream_id": "s1"})) == "UNAUTHORIZED"  # already revoked
    assert grant(world, {"actor": actor(1), "stream_id": "s1"})["ok"]  # granted again there
    assert world.view().actor_authorized(addr(ALICE), actor(1), "s1")
    assert revoke(world, {"actor": actor(1), "all_streams": True})["ok"]  # no longer the account's actor
    view = world.view()
    assert not view.actor_authorized(addr(ALICE), actor(1), "s2")
    assert view.actor_authorized(addr(ALICE), actor(1), "s1")  # its own grant on s1 stands


@pytest.mark.parametrize("body", [{"actor": actor(1)}, {"actor": actor(1), "stream_id": SID, "all_streams": True},
                                  {"actor": actor(1), "all_streams": "yes"}, {"actor": actor(1), "all_streams": False}])
def test_a_grant_names_one_stream_or_all_streams(body: dict) -> None:
    assert code(grant(World(), body)) == "INVALID_ARGUMENT"


@pytest.mark.parametrize("who", ["0x" + "00" * 32, "0x" + (1).to_bytes(32, "big").hex(), "0x" + "ab" * 32,
                                 "0x" + "ff" * 32])
def test_authorizing_an_actor_that_cannot_exist_is_unauthorized(who: str) -> None:
    """Failed before the fix: any 32 bytes were authorized (CIP-7 step 2: validate the actor exists)."""
    world = World()
    answer = grant(world, {"actor": who, "stream_id": SID})
    assert code(answer) == "UNAUTHORIZED"
    assert answer["error"].details == {"actor": who}
    assert code(grant(world, {"actor": who, "all_streams": True})) == "UNAUTHORIZED"
    assert grant(world, {"actor": addr(BOB), "stream_id": SID})["ok"]  # a real key pair's address


# --- a credit applies once -------------------------------------------------------------------------


def _credits_to(world: World, who: str) -> list:
    return [e for e in world.events if isinstance(e.body, CbyCredited) and e.body.account == who]


def test_a_verbatim_copy_of_a_credit_is_refused_by_every_fold_and_counted_once() -> None:
    """Failed before the fix: the copy of BOB's credit was folded again (balance 80, not 40)."""
    from watchtower.protocol.ledger.keymgr_access import KeymgrState

    world = World()
    world.mint(ALICE, 100)
    assert transfer(world, 40)["ok"]
    credit = _credits_to(world, addr(BOB))[-1]
    # The key manager's and the projections' fold of the whole log, the copy appended to it.
    view = KeymgrState()
    for event in world.events:
        view.apply(event)
    with contextlib.suppress(MalformedRecordError):  # refused: the host quarantines it
        view.apply(credit)
    assert view.balances()[addr(BOB)] == 40
    # The writer's own state (evolve_account, as the worker folds its log) refuses it, naming why.
    bob = world.accounts[account_instance(addr(BOB))]
    with pytest.raises(MalformedRecordError, match="was already applied to the account: this record is a copy"):
        evolve_account(bob, credit)
    assert credit.reply == {"credit_number": 1}


def test_an_old_copy_is_refused_after_later_credits_and_each_purchase_credit_counts_once() -> None:
    from ledger_world import PAID_CONFIG, PUBLISHER, TREASURY

    world = World()
    world.register_paid_stream()
    world.mint(ALICE, 100_000)
    world.mint(PUBLISHER, 5)
    assert world.acquire(ALICE, 12)["ok"]
    assert transfer(world, 7, to=addr(PUBLISHER))["ok"]
    publisher = account_instance(addr(PUBLISHER))
    numbers = [e.reply["credit_number"] for e in _credits_to(world, addr(PUBLISHER))]
    assert numbers == [1, 2, 3]  # the mint, the purchase's revenue, the transfer
    balance = world.balance(PUBLISHER)
    for old in _credits_to(world, addr(PUBLISHER)):
        with pytest.raises(MalformedRecordError, match="copy"):
            evolve_account(world.accounts[publisher], old)
    assert world.balance(PUBLISHER) == balance
    assert [e.reply for e in _credits_to(world, addr(TREASURY))] == [{"credit_number": 1}]
    assert PAID_CONFIG["publisher_treasury"] == addr(PUBLISHER)


def test_a_credit_number_must_follow_and_an_unnumbered_credit_only_precedes_the_numbered_ones() -> None:
    world = World()
    world.mint(BOB, 10)
    credit = _credits_to(world, addr(BOB))[0]
    fresh = AccountState.initial(account_instance(addr(BOB)))
    for reply in ({"credit_number": 2}, {"credit_number": 0}, {"credit_number": "1"}):
        with pytest.raises(MalformedRecordError):
            evolve_account(fresh, dataclasses.replace(credit, reply=reply))
    # A log written before credits were numbered still folds, each record as before...
    legacy = dataclasses.replace(credit, reply={})
    before = evolve_account(evolve_account(fresh, legacy), credit)
    assert (before.balance_cby, before.credits) == (20, 1)
    # ...but an unnumbered record after a numbered credit is not one this release wrote: a copy.
    with pytest.raises(MalformedRecordError, match="without a number"):
        evolve_account(before, legacy)


def test_the_applied_credits_survive_a_snapshot_and_a_rebuild_so_a_copy_stays_refused() -> None:
    from watchtower.protocol.ledger.snapshots import decode_ledger, encode_ledger

    world = World()
    world.mint(ALICE, 100)
    assert transfer(world, 40)["ok"]
    assert transfer(world, 2)["ok"]
    bob = account_instance(addr(BOB))
    restored = decode_ledger("accounts", encode_ledger("accounts", world.accounts))
    assert restored == world.accounts
    assert restored[bob].credits == 2
    rebuilt = world.view().accounts  # the same log folded from nothing
    assert rebuilt == world.accounts
    for state in (restored[bob], rebuilt[bob]):
        with pytest.raises(MalformedRecordError, match="copy"):
            evolve_account(state, _credits_to(world, addr(BOB))[0])


def create(world: World, who: str, signer=ALICE) -> dict:
    return world.send(world.sign(signer, "create_actor", account_instance(addr(signer)), {"actor": who}))


def test_an_actor_the_account_created_is_authorized_everywhere_without_a_grant_until_revoked() -> None:
    """CIP-7 actor.creator: failed before the fix (no create_actor; only a grant made an actor own)."""
    world = World()
    answer = create(world, actor(7))
    assert answer["ok"], answer
    assert answer["result"]["own_actor"] is True
    assert [e.type for e in world.events] == ["ActorCreated"]  # a creation, not a grant
    view, state = world.view(), world.accounts[account_instance(addr(ALICE))]
    assert view.actor_authorized(addr(ALICE), actor(7), "s1")
    assert view.actor_authorized(addr(ALICE), actor(7), "s2")
    assert not view.actor_authorized(addr(BOB), actor(7), "s1")
    assert state.active_per_stream.get("s1", 0) == 0  # no grant slot of any stream is taken
    assert create(world, actor(7))["ok"]  # again: nothing changes
    assert revoke(world, {"actor": actor(7), "stream_id": "s1"})["ok"]  # taken back on one stream
    view = world.view()
    assert not view.actor_authorized(addr(ALICE), actor(7), "s1")
    assert view.actor_authorized(addr(ALICE), actor(7), "s2")
    assert revoke(world, {"actor": actor(7), "all_streams": True})["ok"]  # and everywhere
    assert not world.view().actor_authorized(addr(ALICE), actor(7), "s2")
    assert code(revoke(world, {"actor": actor(7), "all_streams": True})) == "UNAUTHORIZED"
    assert code(create(world, "0x" + "ab" * 32)) == "UNAUTHORIZED"  # an actor that cannot exist
    assert code(create(world, addr(ALICE))) == "INVALID_ARGUMENT"


def test_the_sixty_fifth_own_actor_is_refused() -> None:
    world = World()
    for n in range(1, 65):
        assert create(world, actor(n))["ok"]
    assert code(create(world, actor(65))) == "AUTHORIZATION_LIMIT_REACHED"


def test_a_forged_actor_created_record_is_quarantined() -> None:
    world = World()
    assert create(world, actor(1))["ok"]
    event = world.events[-1]
    state = AccountState.initial(account_instance(addr(ALICE)))
    with pytest.raises(MalformedRecordError):
        evolve_account(state, dataclasses.replace(event, body=dataclasses.replace(event.body, actor=addr(ALICE))))
