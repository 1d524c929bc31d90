"""Metric groups with a meaning of their own to the master."""

# Samples of a run's processes, GPUs and host, by the agent (agent_worker/system_metrics.py):
# keyed by the sample's time in milliseconds since the epoch, not by a batch count, so they
# never move a trial's progress or reach its searcher.
SYSTEM = "system"
