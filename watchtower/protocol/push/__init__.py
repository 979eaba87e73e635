"""Push delivery rules: the per-subscription schedule and its checkpoints."""
