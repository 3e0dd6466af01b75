"""Questions asked of the serving model: closed forms, break-even points, capacity plans, sensitivity and
sweeps."""
