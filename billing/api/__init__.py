"""The management API's read-only money endpoints: usage, request log, balance, ledger."""
