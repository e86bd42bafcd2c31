"""Targets whose step leaves processes behind that a process group does not hold."""
import os
import subprocess
import sys

from tests.broken.adamw import CorrectAdamW

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


class NewSessionAdamW(CorrectAdamW):
    """Correct, but each step starts a sleeper in a session of its own."""

    def step(self, closure=None):
        subprocess.Popen(SLEEPER, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return super().step(closure)


class DaemonAdamW(CorrectAdamW):
    """Correct, but its first step double-forks a daemon that keeps the inherited stdout/stderr open."""

    def step(self, closure=None):
        if not getattr(self, "_forked", False):
            self._forked = True
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv(sys.executable, SLEEPER)
                os._exit(0)
        return super().step(closure)
