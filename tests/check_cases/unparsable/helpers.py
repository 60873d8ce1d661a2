"""Shared helpers that someone put among the revisions."""
TABLES = ["t", "u"]
