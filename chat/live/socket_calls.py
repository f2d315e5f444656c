"""A socket's database work: the services the consumer calls, on the sockets' own threads.

The consumer (chat/live/consumers.py) holds no database code: each service it
calls is wrapped here to be awaited from the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import SyncToAsync

from chat.database import connections_tidy
from chat.message_rate import message_rate_check
from chat.selectors import conversation_get
from chat.services.approvals import tool_call_decide
from chat.services.runs import run_cancel_by_id, run_start

# The sockets' database calls: a few threads of their own, for the life of the process.
SOCKET_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="toolchat-socket")


def on_any_thread(function: Callable[..., Any]) -> Any:
    """A socket's database work, run on the sockets' threads.

    Channels' default runs every consumer's database call on one shared thread
    (thread-sensitive mode): with a hundred sockets posting at once, each
    post waited for all the others. These calls share nothing with one
    another or with the request thread, so any of a few threads will do. Like
    channels' `database_sync_to_async`, except that a thread keeps a healthy
    SQLite connection between calls (chat/database.py `connections_tidy`).
    """
    return _SocketCall(function, thread_sensitive=False, executor=SOCKET_THREADS)


class _SocketCall(SyncToAsync[..., Any]):
    """A call on the sockets' threads, their connections tidied before and after."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        connections_tidy()
        try:
            return super().thread_handler(loop, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            connections_tidy()


@on_any_thread
def socket_conversation_get(conversation_id: Any, user: Any) -> Any:
    return conversation_get(conversation_id=conversation_id, user=user)


@on_any_thread
def socket_run_start(conversation: Any, content: str, user: Any, replaces: Any, images: Any) -> Any:
    message_rate_check(user)
    return run_start(conversation=conversation, content=content, replaces=replaces, images=images)


@on_any_thread
def socket_run_cancel(conversation_id: Any, run_id: str) -> Any:
    return run_cancel_by_id(conversation_id=conversation_id, run_id=run_id)


@on_any_thread
def socket_tool_call_decide(
    conversation_id: Any,
    execution_id: str,
    user: Any,
    approve: bool,
    reason: str,
    choices: dict[str, Any],
) -> Any:
    return tool_call_decide(
        execution_id=execution_id,
        user=user,
        approve=approve,
        reason=reason,
        conversation_id=conversation_id,
        **choices,
    )
