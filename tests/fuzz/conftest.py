from pathlib import Path

import pytest

from .sandbox import Sandbox

_SANDBOXES: list = []


@pytest.fixture(scope="session")
def sandbox():
    sb = Sandbox()
    _SANDBOXES.append(sb)
    yield sb
    sb.close()


def pytest_collection_modifyitems(items):
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.fuzz)


def pytest_sessionfinish(session):
    """Hand this process's cases (target, exit status, seconds) to the summary of tests/conftest.py: through
    ``config.sacmodel_fuzz`` here, and through xdist's ``workeroutput`` from a worker to the controller."""
    results = [[r.target or "other", r.rc, r.seconds] for sb in _SANDBOXES for r in sb.results]
    session.config.sacmodel_fuzz = results
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["sacmodel_fuzz"] = results
