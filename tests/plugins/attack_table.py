"""The attack suite's table: hostile cases and answers by surface, printed at the end of a run.

Tests that send hostile input record each answer with the `attack_answers`
fixture (`add(surface, status)`; a status below 100 is a socket that dropped).
The answers travel with each test's report (its `user_properties`), so the
table is whole under pytest-xdist too. At the end of a run that ran tests of
the attack suite (`make attack`, `pytest -m attack`), the summary prints one
row per surface: cases, answers by class, and the 5xx, which must be 0; then
the suite's categories (tests/attack_suite.py) with their tests passed and
failed.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest

from tests.attack_suite import ATTACKS, matches

PROPERTY = "attack_answers"
KINDS = ("2xx", "3xx", "4xx", "5xx", "dropped")


class AttackAnswers:
    """One test's answers, by surface and class."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def add(self, surface: str, status: int) -> None:
        """Count one hostile case's answer on a surface."""
        self.counts[surface][f"{status // 100}xx" if status >= 100 else "dropped"] += 1

    def as_property(self) -> dict[str, dict[str, int]]:
        return {surface: dict(counts) for surface, counts in self.counts.items()}


@pytest.fixture
def attack_answers(request: pytest.FixtureRequest) -> Iterator[AttackAnswers]:
    """Where a hostile test counts its answers for the attack suite's table."""
    answers = AttackAnswers()
    yield answers
    if answers.counts:
        request.node.user_properties.append((PROPERTY, answers.as_property()))


class _Table:
    def __init__(self) -> None:
        self.surfaces: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.categories: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            for name, value in report.user_properties:
                if name == PROPERTY:
                    for surface, counts in value.items():
                        self.surfaces[surface].update(counts)
            return
        if report.when == "setup" and report.outcome == "passed":
            return  # counted once, by its call
        for category, patterns in ATTACKS.items():
            if any(matches(report.nodeid, pattern) for pattern in patterns):
                self.categories[category][report.outcome] += 1
                break

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.categories:
            return
        write = terminalreporter.write_line
        terminalreporter.section("attack suite: hostile cases by surface")
        width = max([len(s) for s in self.surfaces] + [len("surface")]) + 2
        write(f"{'surface':<{width}}{'cases':>8}" + "".join(f"{k:>9}" for k in KINDS))
        totals: collections.Counter[str] = collections.Counter()
        for surface, counts in sorted(self.surfaces.items()):
            totals.update(counts)
            cases = sum(counts.values())
            write(f"{surface:<{width}}{cases:>8}" + "".join(f"{counts[k]:>9}" for k in KINDS))
        cases = sum(totals.values())
        write(f"{'all':<{width}}{cases:>8}" + "".join(f"{totals[k]:>9}" for k in KINDS))
        terminalreporter.section("attack suite: tests by category (tests/attack_suite.py)")
        width = max(len(c) for c in ATTACKS) + 2
        write(f"{'category':<{width}}{'passed':>8}{'failed':>8}{'skipped':>9}")
        for category in ATTACKS:
            counts = self.categories.get(category, collections.Counter())
            write(
                f"{category:<{width}}{counts['passed']:>8}{counts['failed']:>8}"
                f"{counts['skipped']:>9}"
            )
        verdict = "0 x 5xx" if not totals["5xx"] else f"{totals['5xx']} x 5xx"
        write(f"{cases:,} hostile cases answered on {len(self.surfaces)} surfaces: {verdict}")


def pytest_configure(config: pytest.Config) -> None:
    # One table, kept by the process that prints the summary (xdist's controller too).
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Table(), "attack-table")
