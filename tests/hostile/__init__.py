"""Hostile-bundle corpus (see corpus.py)."""
