"""Targets whose step leaves processes behind that a process group does not hold."""
import os
import shutil
import subprocess

from tests.broken.adamw import CorrectAdamW

# a small binary, not an interpreter: inference steps this target hundreds of times, and one Python
# start per step made its test take two minutes; `sleep` inherits the environment (and its tag) alike
SLEEPER = [shutil.which("sleep") or "/bin/sleep", "600"]


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
                    os.execv(SLEEPER[0], SLEEPER)
                os._exit(0)
        return super().step(closure)
