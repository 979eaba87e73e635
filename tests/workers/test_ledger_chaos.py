"""CBY is conserved and no purchase is charged twice while workers are killed with kill -9.

Two workers, one projection, a real broker. 50 accounts (ten of them poor, so some purchases and
transfers are refused) run 800 purchases, transfers and burns (2,000 in the soak tier), one command
in flight per account,
while a worker is killed with kill -9 and restarted three times (at a quarter, half and three
quarters of the work). A command that times out is resent as the same signed command, and at the
end every account's last accepted command on each instance is resent once more: each gets its
original answer marked duplicate.

Afterwards, folding the committed events topic and reading the live API:
- every account's balance is what the acknowledged answers imply, and the sum of the balances is
  the supply: minted minus burned;
- every movement happened exactly once per command (one debit and one credit per transfer, one
  purchase debit and one credit per treasury per purchase, none for a refused command);
- every acknowledged purchase's entitlement is present (active until the highest target bought);
- the live keymgr digest equals an offline rebuild of the log, with nothing quarantined.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, cast

import nacl.signing
import pytest
from api_calls import http, wait_for
from ledger_load import Account, Answer, Sender, paid_stream_body
from stack_fixture import start_stack
from tiers import scale
from worker_harness import read_committed_events

from watchtower.gateway.transport import CommandClient
from watchtower.projections.rebuild import rebuild_keymgr_digest
from watchtower.protocol.events import event_fields
from watchtower.protocol.ledger.billing import key_epoch_at

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

ACCOUNTS = 50
POOR = 10  # accounts minted too little for many purchases: some refusals on the log
OPS_PER_ACCOUNT = scale(16, 40)  # 50 x 16 = 800 (soak: 2,000) purchases, transfers and burns
KILLS = 3
RICH_MINT, POOR_MINT = 1_000_000, 300
FEE, BPS, EPOCH_BLOCKS = 100, 250, 3600
REFUSALS = frozenset({"INSUFFICIENT_CBY_BALANCE"})


def test_cby_conserved_and_purchases_charged_once_under_kill9(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    minter, owner = Account(), Account()
    treasury = os.environ["WATCHTOWER_PROTOCOL_TREASURY"]  # the deployment's, set for every test
    monkeypatch.setenv("WATCHTOWER_CBY_MINTER", minter.address)  # inherited by the workers
    accounts = [Account() for _ in range(ACCOUNTS)]
    with start_stack(kafka_bootstrap, tmp_path, workers=2) as stack:
        client = CommandClient(kafka_bootstrap, prefix=stack.prefix)
        sender = Sender(client)
        try:
            minted = {a.address: (POOR_MINT if i < POOR else RICH_MINT) for i, a in enumerate(accounts)}
            for address, amount in minted.items():
                sender.ok(minter.mint(address, amount))
            streams = [f"paid-{uuid.uuid4().hex[:8]}" for _ in range(2)]
            for sid in streams:
                body = paid_stream_body(owner, nacl.signing.SigningKey.generate(), fee=FEE, bps=BPS,
                                        key_epoch_blocks=EPOCH_BLOCKS)
                sender.ok(owner.sign("create_stream", sid, body))
                wait_for(lambda s=sid: http("GET", f"{stack.api_url}/v1/streams/{s}/entitlements/{owner.address}"
                                            )[0] == 200, timeout_s=120, what=f"{sid} to be registered as paid")
            epoch0 = key_epoch_at(int(time.time() * 1000), EPOCH_BLOCKS)

            answers: dict[str, list[tuple[str, Any, Answer]]] = defaultdict(list)
            done = Counter[str]()
            progress = threading.Condition()

            def run(i: int, account: Account) -> None:
                local = random.Random(i)
                targets = dict.fromkeys(streams, epoch0)
                for j in range(OPS_PER_ACCOUNT):
                    arg: Any
                    if j % 10 == 9:
                        op, arg = "burn", local.randint(1, 50)
                        answer = sender.send(account.burn(arg))
                    elif j % 2 == 0:
                        sid = streams[(j // 2) % 2]
                        targets[sid] += 1
                        op, arg = "purchase", (sid, targets[sid])
                        answer = sender.send(account.acquire(sid, targets[sid]))
                    else:
                        to = accounts[local.choice([k for k in range(ACCOUNTS) if k != i])].address
                        op, arg = "transfer", (to, local.randint(1, 2_000))
                        answer = sender.send(account.transfer(to, arg[1]))
                    answers[account.address].append((op, arg, answer))
                    with progress:
                        done["ops"] += 1
                        progress.notify_all()

            def killer() -> None:
                total = ACCOUNTS * OPS_PER_ACCOUNT
                for k in range(KILLS):
                    mark = total * (k + 1) // (KILLS + 1)
                    with progress:
                        progress.wait_for(lambda: done["ops"] >= mark, timeout=600)  # noqa: B023 (waited on now)
                    name = f"w{1 + k % 2}"
                    stack.kill9(f"worker-{name}")
                    stack.start_worker(name)
                    done["kills"] += 1

            threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(accounts)]
            chaos = threading.Thread(target=killer, daemon=True)
            chaos.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join(900)
            chaos.join(60)
            assert done["ops"] == ACCOUNTS * OPS_PER_ACCOUNT, "some accounts never finished their work"
            assert done["kills"] == KILLS
            print(f"accepted commands resent at the end, answered as duplicates: "
                  f"{_resend_the_last_commands(sender, answers)}")
        finally:
            client.close()
        print(f"resends after a timeout or NOT_READY: {sender.resends}")

        expected = _expected_balances(minted, answers, owner.address, treasury)
        refused = [a for acct in answers.values() for _op, _arg, a in acct if not a.ok]
        assert {a.code for a in refused} <= REFUSALS, Counter(a.code for a in refused)
        outcomes = Counter((op, a.ok) for acct in answers.values() for op, _arg, a in acct)
        print(f"answers (operation, accepted): {dict(outcomes)}")
        # Both paths of the saga ran: paid purchases and purchases the payer's balance refused.
        assert outcomes[("purchase", True)] > 0
        assert outcomes[("purchase", False)] > 0

        # Credits travel on `internal` after the debit's answer: wait for the log to settle.
        log: dict[str, Any] = {}

        def settled() -> bool:
            log.update(_fold(kafka_bootstrap, stack.prefix))
            return _nonzero(log["balances"]) == _nonzero(expected)

        wait_for(settled, timeout_s=180, what="the log's balances to match the acknowledged answers")
        assert sum(log["balances"].values()) == log["minted"] - log["burned"] == log["supply"]
        assert log["minted"] == sum(minted.values())
        _check_exactly_once(log, answers, owner.address, treasury)
        entitled = _acked_entitlements(answers)
        assert _log_entitlements(log) == entitled, "the log's entitlements differ from the acknowledged purchases"

        # The projection folds the same log a little later: wait for it, then compare exactly.
        wait_for(lambda: _api_balances(stack.api_url, expected) == expected, timeout_s=120,
                 what="the API's balances to equal the acknowledged answers")
        wait_for(lambda: _api_entitlements(stack.api_url, entitled) == entitled, timeout_s=120,
                 what="the API's entitlements to equal the acknowledged purchases")
        wait_for(lambda: _supply(stack.api_url) == (log["supply"], log["supply"]), timeout_s=60,
                 what="the API's supply and sum of balances to equal the log's")
        offline = rebuild_keymgr_digest(stack.bootstrap, stack.prefix)
        assert offline["quarantined"]["count"] == 0, offline["quarantined"]
        wait_for(lambda: http("GET", f"{stack.api_url}/v1/keymgr/digest")[1]["digest"] == offline["digest"],
                 timeout_s=60, what="the live keymgr digest to equal the offline rebuild")


def _resend_the_last_commands(sender: Sender, answers: dict[str, list[tuple[str, Any, Answer]]]) -> int:
    """Send every account's last acknowledged command on each instance again, as a client whose
    answer was lost would: the same signed command gets the original answer marked duplicate (the
    log checks that follow prove it moved nothing). An instance remembers only its caller's last
    nonce, so older commands would be NONCE_REPLAYED, which is why only the last ones are resent."""
    last: dict[tuple[str, str], Answer] = {}
    for account, ops in answers.items():
        for _op, _arg, answer in ops:
            last[(account, answer.command.stream_id)] = answer
    resent = 0
    for answer in last.values():
        if not answer.ok:
            continue  # a refused transfer is decided again on a resend (and may now be paid)
        again = sender.send(answer.command)
        assert again.ok, f"a resent {answer.command.method} was refused: {again.code}: {again.message}"
        assert again.result is not None
        assert answer.result is not None
        assert again.result.get("duplicate") is True, again.result
        strip = {"duplicate"}
        assert {k: v for k, v in again.result.items() if k not in strip} == {
            k: v for k, v in answer.result.items() if k not in strip}
        resent += 1
    assert resent >= ACCOUNTS, "too few commands were resent to prove anything"
    return resent


def _expected_balances(minted: dict[str, int], answers: dict[str, list[tuple[str, Any, Answer]]],
                       publisher_treasury: str, protocol_treasury: str) -> dict[str, int]:
    """Every balance the acknowledged answers imply, order-free."""
    out = Counter(minted)
    for account, ops in answers.items():
        for op, arg, answer in ops:
            if not answer.ok:
                continue
            assert answer.result is not None
            if op == "transfer":
                out[account] -= arg[1]
                out[arg[0]] += arg[1]
            elif op == "burn":
                out[account] -= arg
            else:
                out[account] -= answer.result["total_amount_cby"]
                out[publisher_treasury] += answer.result["publisher_amount_cby"]
                out[protocol_treasury] += answer.result["protocol_fee_cby"]
    return dict(out)


def _fold(bootstrap: str, prefix: str) -> dict[str, Any]:
    """Balances, supply and every movement, folded from the committed events topic."""
    balances: Counter[str] = Counter()
    moves: Counter[tuple[str, str, str, str, int]] = Counter()  # (type, reason, ref, account, amount)
    purchased: dict[str, dict[str, Any]] = {}
    failed: set[str] = set()
    minted = burned = supply = 0
    for logged in read_committed_events(bootstrap, prefix):
        ev, body = logged.event, logged.event.body  # narrowed by ev.type; read as the typed class
        body = cast(Any, body)
        if ev.type in ("CbyCredited", "CbyDebited"):
            sign = 1 if ev.type == "CbyCredited" else -1
            balances[body.account] += sign * body.amount_cby
            moves[(ev.type, body.reason, body.ref, body.account, body.amount_cby)] += 1
        elif ev.type == "CbyMinted":
            minted += body.amount_cby
            supply = body.total_supply_cby
        elif ev.type == "CbyBurned":
            burned += body.amount_cby
            supply = body.total_supply_cby
        elif ev.type == "EpochAccessPurchased":
            assert body.purchase_id not in purchased, f"purchase {body.purchase_id} completed twice"
            purchased[body.purchase_id] = event_fields(body)
        elif ev.type == "EpochAccessFailed":
            failed.add(body.purchase_id)
    return {"balances": dict(balances), "moves": moves, "purchased": purchased,
            "failed": failed, "minted": minted, "burned": burned, "supply": supply}


def _nonzero(balances: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in balances.items() if v}


def _check_exactly_once(log: dict[str, Any], answers: dict[str, list[tuple[str, Any, Answer]]],
                        publisher_treasury: str, protocol_treasury: str) -> None:
    """One debit and one credit per acknowledged command, none for a refused one, by `ref`."""
    moves: Counter[tuple[str, str, str, str, int]] = log["moves"]
    by_ref: dict[str, list[tuple[str, str, str, int]]] = defaultdict(list)
    for (typ, reason, ref, account, amount), n in moves.items():
        by_ref[ref].extend([(typ, reason, account, amount)] * n)
    purchase_debits = Counter(ref for (typ, reason, ref, _a, _n) in moves.elements()
                              if typ == "CbyDebited" and reason == "purchase")
    assert all(n == 1 for n in purchase_debits.values()), "a purchase was charged twice"
    assert set(purchase_debits) == set(log["purchased"]), "a charge without a purchase, or the reverse"
    for account, ops in answers.items():
        for op, arg, answer in ops:
            ref = answer.digest_hex
            got = sorted(by_ref.get(ref, []))
            if not answer.ok:
                assert got == [], f"refused {op} {ref} moved CBY: {got}"
                assert ref not in log["purchased"]
                continue
            assert answer.result is not None
            if op == "transfer":
                want = [("CbyCredited", "transfer", arg[0], arg[1]), ("CbyDebited", "transfer", account, arg[1])]
            elif op == "burn":
                want = [("CbyDebited", "burn", account, arg)]
            else:
                r = answer.result
                assert log["purchased"][ref]["to_key_epoch"] == r["to_key_epoch"] == arg[1]
                want = [("CbyDebited", "purchase", account, r["total_amount_cby"])]
                if r["publisher_amount_cby"]:
                    want.append(("CbyCredited", "publisher_revenue", publisher_treasury, r["publisher_amount_cby"]))
                if r["protocol_fee_cby"]:
                    want.append(("CbyCredited", "protocol_fee", protocol_treasury, r["protocol_fee_cby"]))
            assert got == sorted(want), f"{op} {ref}: {got} != {sorted(want)}"


def _acked_entitlements(answers: dict[str, list[tuple[str, Any, Answer]]]) -> dict[tuple[str, str], int]:
    """(stream, beneficiary) -> the highest target an acknowledged purchase bought."""
    highest: dict[tuple[str, str], int] = {}
    for account, ops in answers.items():
        for op, arg, answer in ops:
            if op == "purchase" and answer.ok:
                highest[(arg[0], account)] = max(highest.get((arg[0], account), 0), arg[1])
    assert highest, "no purchase was acknowledged"
    return highest


def _log_entitlements(log: dict[str, Any]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for body in log["purchased"].values():
        key = (body["stream_id"], body["beneficiary_account"])
        out[key] = max(out.get(key, 0), body["to_key_epoch"])
    return out


def _api_entitlements(api: str, wanted: dict[tuple[str, str], int]) -> dict[tuple[str, str], int | None]:
    out = {}
    for sid, account in wanted:
        status, body = http("GET", f"{api}/v1/streams/{sid}/entitlements/{account}")
        out[(sid, account)] = body["active_until_key_epoch"] if status == 200 else None
    return out


def _api_balances(api: str, wanted: dict[str, int]) -> dict[str, int | None]:
    out = {}
    for address in wanted:
        status, body = http("GET", f"{api}/v1/accounts/{address}")
        out[address] = body["balance_cby"] if status == 200 else None
    return out


def _supply(api: str) -> tuple[int, int]:
    status, body = http("GET", f"{api}/v1/cby/supply")
    return (body["total_supply_cby"], body["sum_of_balances_cby"]) if status == 200 else (-1, -1)


def test_the_exactly_once_check_catches_a_double_charge_and_a_charged_refusal() -> None:
    """The checks above can fail: a purchase debited twice, or a refused one debited at all."""
    buyer, publisher, treasury = (Account().address for _ in range(3))
    cmd = Account().acquire("s", 5)
    receipt = {"to_key_epoch": 5, "total_amount_cby": 102, "publisher_amount_cby": 100, "protocol_fee_cby": 2}
    acked = Answer(cmd, True, receipt, None, "", 1, 0.0)
    ref = acked.digest_hex
    moves = Counter({("CbyDebited", "purchase", ref, buyer, 102): 1, ("CbyCredited", "publisher_revenue", ref,
                     publisher, 100): 1, ("CbyCredited", "protocol_fee", ref, treasury, 2): 1})
    log = {"moves": moves, "purchased": {ref: {"to_key_epoch": 5}}}
    _check_exactly_once(log, {buyer: [("purchase", ("s", 5), acked)]}, publisher, treasury)  # as it should be
    twice = {**log, "moves": moves + Counter({("CbyDebited", "purchase", ref, buyer, 102): 1})}
    with pytest.raises(AssertionError, match="charged twice"):
        _check_exactly_once(twice, {buyer: [("purchase", ("s", 5), acked)]}, publisher, treasury)
    refused = Answer(cmd, False, None, "INSUFFICIENT_CBY_BALANCE", "no", 1, 0.0)
    with pytest.raises(AssertionError, match="refused purchase"):
        _check_exactly_once(log, {buyer: [("purchase", ("s", 5), refused)]}, publisher, treasury)
