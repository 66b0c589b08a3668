"""The conformance matrix: every spec shape through an exact ledger (see docs/conformance.md)."""
