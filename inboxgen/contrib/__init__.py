"""Integrations with frameworks that only some services use, each behind an extra."""
