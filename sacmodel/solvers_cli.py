"""CLI commands of the solvers (registered by :mod:`sacmodel.cli`)."""


def register(sub, add_scenario, add_workload):
    return None
