"""The runtime: workers serving generated queue tables."""
