"""The ledger and paid access: accounts, CBY supply, paid streams, billing, key-manager access
and the ledger run."""
