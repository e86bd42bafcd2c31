"""An AdamW that runs only where the CLI's plan has set ORACLE_TEST_PLANNED: a worker started before
the plan (oracle.compare.running.workers.Pool.prestart) must still see the environment the plan leaves
(workers.ENV_UPDATE), as inferred conventions and the known-findings file reach jobs that way."""
import os

import torch

PLANNED = "set by the plan"


class PlannedEnvAdamW(torch.optim.AdamW):
    def __init__(self, *args, **kwargs):
        if os.environ.get("ORACLE_TEST_PLANNED") != PLANNED:
            raise RuntimeError("the worker did not get the environment the plan left")
        super().__init__(*args, **kwargs)
