"""Training entry points (see the README roadmap)."""
