"""The push delivery worker: pushes new messages to PUSH / PUSH_WITH_PULL_FALLBACK subscribers on
``deliveries`` under the per-block bounds (rules in `watchtower.protocol.push.schedule`, docs/push.md)."""
