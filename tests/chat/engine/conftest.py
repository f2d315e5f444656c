"""The turn engine's tests use the stack fixtures of tests/conftest.py."""

from tests.stack import wait_for_run

__all__ = ["wait_for_run"]
