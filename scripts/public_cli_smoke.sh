#!/usr/bin/env bash
# A paid feed end to end, written only against the public `cowboy watchtower` CLI's command lines
# (shared/spec/cowboy-watchtower-cli.md, and issue 21's list: register-key, list-keys, revoke-key,
# acquire-access --to-epoch --account-key-id --beneficiary --payer, fetch-keys --epochs, consume,
# subscribe --mode push-fallback, announce-key-epoch, pre-wrap-epochs, wrap-daemon, rewrap-epochs).
#
# Run it against a running stack (`watchtower up`), with:
#   PUBLISHER_HOME, READER_HOME  two WATCHTOWER_HOME directories, each holding its `default` account
#                                (the public CLI's key auto-discovery finds it); the reader holds at
#                                least 2,100 CBY wei
#   WATCHTOWER_API, WATCHTOWER_KEYMGR  where the API and the key manager answer, unless each home's
#                                config.json (written by `watchtower up`) says so
# It needs bash and jq, exits non-zero on the first step that fails, and prints "public CLI smoke: ok".
set -euo pipefail

: "${PUBLISHER_HOME:?a WATCHTOWER_HOME holding the publisher's default account}"
: "${READER_HOME:?a WATCHTOWER_HOME holding the reader's default account}"

publisher() { WATCHTOWER_HOME="$PUBLISHER_HOME" watchtower "$@"; }
reader() { WATCHTOWER_HOME="$READER_HOME" watchtower "$@"; }
step() { echo "== ${SECONDS}s: $*" >&2; }
fail() { echo "public CLI smoke: FAILED: $*" >&2; exit 1; }

# Writes are acknowledged by the stream's writer; the read side and the key manager show them a
# moment later. `eventually CHECK CMD...` reruns CMD until it succeeds and its JSON passes the jq
# CHECK (at most ~60 tries), then prints that JSON.
eventually() {
  local check=$1 out="" tries=0
  shift
  while true; do
    if out=$("$@" 2>/dev/null) && jq -e "$check" >/dev/null 2>&1 <<<"$out"; then
      printf '%s\n' "$out"
      return 0
    fi
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
      printf '%s\n' "$out" >&2
      fail "$* never satisfied $check"
    fi
    sleep 0.2
  done
}

step "publisher: a paid feed"
FEED=$(publisher new feed --name public-cli-smoke --description "the public CLI smoke" \
  --access-mode subscriber-paid --fee-per-epoch-cby 1000 --protocol-fee-bps 500 --key-epoch-blocks 86400 \
  --json | jq -er .feed_id)

step "reader: account register-key --scheme x25519"
K1=$(reader account register-key --scheme x25519 --json | jq -er .account_key_id)

step "publisher: feed $FEED publish (encrypted through the key manager)"
eventually '.sequence == 1' publisher feed "$FEED" publish --kind signal --data '{"side":"buy","n":1}' --json >/dev/null

step "reader: feed $FEED get-since --cursor 0 --limit 10 (ciphertext, and the key epoch)"
PAGE=$(eventually '(.messages | length) == 1' reader feed "$FEED" get-since --cursor 0 --limit 10 --json)
jq -e '.messages[0].payload_format == "CIPHERTEXT"' >/dev/null <<<"$PAGE" || fail "the message is not ciphertext"
E=$(jq -er '.messages[0].key_epoch' <<<"$PAGE")

step "reader: feed $FEED acquire-access --to-epoch $((E + 1)) --account-key-id $K1"
RECEIPT=$(eventually '.epochs_charged == 2' \
  reader feed "$FEED" acquire-access --to-epoch $((E + 1)) --account-key-id "$K1" --json)
ME=$(jq -er .beneficiary_account <<<"$RECEIPT")

step "reader: acquire-access again with --beneficiary and --payer (already covered: nothing charged)"
reader feed "$FEED" acquire-access --to-epoch "$E" --account-key-id "$K1" --beneficiary "$ME" --payer "$ME" \
  --json | jq -e '.epochs_charged == 0 and .total_amount_cby == 0' >/dev/null || fail "a covered epoch was charged"

step "reader: feed $FEED fetch-keys --account-key-id $K1 --epochs $E"
eventually ".key_epochs == [$E]" reader feed "$FEED" fetch-keys --account-key-id "$K1" --epochs "$E" --json >/dev/null

step "reader: feed $FEED consume --account-key-id $K1 --cursor 0 --limit 10 (pull, verify, decrypt)"
reader feed "$FEED" consume --account-key-id "$K1" --cursor 0 --limit 10 --json \
  | jq -e '[.messages[].plaintext] == ["{\"side\":\"buy\",\"n\":1}"]' >/dev/null || fail "consume did not decrypt"

step "reader: feed $FEED subscribe --mode push-fallback"
reader feed "$FEED" subscribe --mode push-fallback --json \
  | jq -e '.mode == "PUSH_WITH_PULL_FALLBACK" and .status == "ACTIVE"' >/dev/null || fail "subscribe"

step "publisher: feed $FEED announce-key-epoch $E"
publisher feed "$FEED" announce-key-epoch "$E" --json >/dev/null

step "reader: feed $FEED pre-wrap-epochs --from $E --to $((E + 1))"
reader feed "$FEED" pre-wrap-epochs --from "$E" --to $((E + 1)) --json \
  | jq -e ".fetched == [$((E + 1))] and .already == [$E]" >/dev/null || fail "pre-wrap-epochs"

step "reader: feed $FEED wrap-daemon --depth 1 (its first step, then stopped)"
exec {DAEMON_OUT}< <(WATCHTOWER_HOME="$READER_HOME" exec watchtower feed "$FEED" wrap-daemon --depth 1 2>&1)
DAEMON_PID=$!
read -r -t 120 FIRST <&"$DAEMON_OUT" || FIRST=""
kill "$DAEMON_PID" 2>/dev/null || true
exec {DAEMON_OUT}<&-
[[ "$FIRST" == *"sealed ahead 0 epoch key(s)"*"2 already sealed here"* ]] || fail "wrap-daemon said: $FIRST"

step "reader: a second account key, revoke-key $K1, list-keys, then rewrap-epochs to the new key"
K2=$(reader account register-key --scheme x25519 --json | jq -er .account_key_id)
reader account revoke-key "$K1" --json >/dev/null
eventually "any(.keys[]; .account_key_id == $K1 and .status == \"REVOKED\") and
            any(.keys[]; .account_key_id == $K2 and .status == \"ACTIVE\")" reader account list-keys --json >/dev/null
eventually "(.fetched + .already | sort) == [$E, $((E + 1))]" reader feed "$FEED" rewrap-epochs --json >/dev/null

echo "public CLI smoke: ok"
