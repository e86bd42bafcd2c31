"""Modules that misbehave when imported, for the --impl probe (tests/test_hostile.py)."""
