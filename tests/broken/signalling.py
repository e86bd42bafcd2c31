"""Targets whose step signals the process that runs them from outside: its parent, or its group."""
import os
import signal

from tests.broken.adamw import CorrectAdamW


class TermParentAdamW(CorrectAdamW):
    """Correct, but each step sends SIGTERM to its parent process."""

    def step(self, closure=None):
        os.kill(os.getppid(), signal.SIGTERM)
        return super().step(closure)


class KillParentAdamW(CorrectAdamW):
    """Correct, but each step sends SIGKILL to its parent process."""

    def step(self, closure=None):
        os.kill(os.getppid(), signal.SIGKILL)
        return super().step(closure)


class KillGroupAdamW(CorrectAdamW):
    """Correct, but each step sends SIGKILL to its own process group."""

    def step(self, closure=None):
        os.killpg(os.getpgrp(), signal.SIGKILL)
        return super().step(closure)
