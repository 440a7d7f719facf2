"""Routing policies: one anchor rule per module, behind a typed registry."""
