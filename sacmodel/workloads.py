"""Generated workloads for cluster replays (re-exported from :mod:`sacmodel.data.workloads`)."""
from .data.workloads import shared_prefix, stage_of

__all__ = ["shared_prefix", "stage_of"]
