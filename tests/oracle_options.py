"""Hyperparameters that turn on what an optimizer can add: weight decay and every boolean option (the
state entries they create), for the tests that run every optimizer through another path of drive
(tests/test_oracle_sliced.py, tests/test_oracle_joined.py)."""


def every_option(spec) -> list[dict]:
    """One group's hyperparameters with weight decay and every boolean option on (maximize and
    nesterov left off), or the defaults where the optimizer refuses that combination."""
    hp = {"weight_decay": 0.1} if "weight_decay" in spec.defaults else {}
    hp.update({k: True for k, v in spec.defaults.items() if v is False and k not in ("maximize", "nesterov")})
    try:
        spec.validate([hp])
    except ValueError:
        return [{}]
    return [hp]
