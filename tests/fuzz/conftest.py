import os
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


def pytest_terminal_summary(terminalreporter):
    results = [r for sb in _SANDBOXES for r in sb.results]
    if not results:
        return
    rc0 = sum(r.rc == 0 for r in results)
    rc2 = sum(r.rc == 2 for r in results)
    slow = max(r.seconds for r in results)
    terminalreporter.write_line(f"fuzz: {len(results)} cases ({os.environ.get('SACMODEL_FUZZ_EXAMPLES', 'default')} "
                                f"examples per target): {rc0} answered, {rc2} refused, "
                                f"{len(results) - rc0 - rc2} other; slowest {slow:.1f} s")
    per: dict[str, list[int]] = {}
    for r in results:
        c = per.setdefault(r.target or "other", [0, 0, 0])
        c[0 if r.rc == 0 else 1 if r.rc == 2 else 2] += 1
    for target, (a, b, c) in sorted(per.items()):
        terminalreporter.write_line(f"  {target}: {a + b + c} cases ({a} answered, {b} refused, {c} other)")
