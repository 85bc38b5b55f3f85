"""Helpers shared by the serving processes."""
