"""appliance: a replicated cron appliance.

Schedules (five-field cron, IANA timezone, JavaScript, policy) are agreed through Raft by a small
cluster of fixed voters; a worker submits each admitted occurrence attempt to an embedded V8
engine at most once.
"""

__version__ = "0.1.0"
