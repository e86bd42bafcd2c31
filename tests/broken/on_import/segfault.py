"""Crashes the interpreter while being imported (a broken native extension)."""
import ctypes

ctypes.string_at(0)
