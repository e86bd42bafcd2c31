"""Running: how the jobs of a sweep are planned and run.

driver      which jobs a selection makes, and running one job
workers     a pool of warm worker processes (a crash, hang or memory blow-up costs one error row)
shard       sharding a sweep over machines and merging the shard reports
            (`python -m oracle.compare.running.shard costs REPORT.json` regenerates costs)
costs       measured seconds per job, the cost model of --shard
"""
