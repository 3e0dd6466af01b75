"""Plots (matplotlib, Agg backend) of serving predictions, solver answers, validation and cluster replays."""
