"""The watchdog: from the ledger alone, what no night is watching (pure checks, one pass)."""
