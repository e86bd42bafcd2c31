"""Calls sys.exit while being imported (a script mistaken for a module)."""
import sys

sys.exit(7)
