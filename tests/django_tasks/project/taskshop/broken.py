"""A module that fails as it is imported (a settings mistake the system checks must report)."""

RATE = 1 / 0
