"""Signals and labels derived from request traces and live events."""
