"""The generator: spec -> catalog -> checks -> statements -> render, and build/verify."""
