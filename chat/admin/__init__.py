"""The admin: importing its modules registers every chat model."""

from chat.admin import conversations, runs

__all__ = ["conversations", "runs"]
