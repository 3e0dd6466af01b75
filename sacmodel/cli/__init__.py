"""The command line, ``sacmodel <command> ...``: one module per command group over the shared option helpers
of :mod:`sacmodel.cli.common`. Bad input exits with status 2 and one line naming what is wrong."""


def main(argv=None) -> int:
    """Run the command line (the ``sacmodel`` entry point)."""
    from .app import main as run
    return run(argv)
