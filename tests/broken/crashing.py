"""Targets that take their process down, for the isolation tests."""
import ctypes

from tests.broken.adamw import CorrectAdamW


class SegfaultAdamW(CorrectAdamW):
    """Native crash mid-step, as a bad kernel would."""

    def step(self, closure=None):
        ctypes.string_at(0)


class HangingAdamW(CorrectAdamW):
    """Never returns from step(). Asleep, not spinning: a spinning hang burned a core for every second
    the tests wait on it (30 core-seconds per run of the hang test), and a timeout cannot tell the two
    apart."""

    def step(self, closure=None):
        import time
        while True:
            time.sleep(0.1)


class RaisingAdamW(CorrectAdamW):
    """Raises on the third step."""

    calls = 0

    def step(self, closure=None):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("kernel launch failed")
        return super().step(closure)


class RankHangingAdamW(CorrectAdamW):
    """Hangs in step() only inside rank processes (RANK is set): rank_skew's ranks outlive the case."""

    def step(self, closure=None):
        import os
        import time
        if "RANK" in os.environ:
            while True:
                time.sleep(0.1)
        return super().step(closure)


class MemoryHogAdamW(CorrectAdamW):
    """Grows its resident memory 64 MB at a time in step(), up to 3 GB, then waits."""

    def step(self, closure=None):
        import time
        hoard = []
        for _ in range(48):
            hoard.append(bytearray(64 << 20))  # zero-filled: resident at once
            time.sleep(0.05)
        while True:
            time.sleep(0.1)
