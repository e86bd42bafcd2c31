"""Measured seconds per job, by (target, kind): the cost model of --shard (oracle.compare.shard)."""

COSTS = {}
