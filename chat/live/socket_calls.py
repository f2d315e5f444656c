"""The socket's database calls, each run on a few threads of the sockets' own.

A consumer holds no database code (STYLE.md rule 7): it awaits these, which
call the same services the REST API calls, on threads that share nothing with
one another or with the request thread.
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

# A few threads of the sockets' own, for the life of the process.
_SOCKET_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="toolchat-socket")


def on_socket_threads(function: Callable[..., Any]) -> Any:
    """A socket's database work, run on the sockets' threads.

    Channels' default runs every consumer's database call on one shared thread
    (thread-sensitive mode): with a hundred sockets posting at once, each
    post waited for all the others. These calls share nothing with one
    another or with the request thread, so any of a few threads will do. Like
    channels' `database_sync_to_async`, except that a thread keeps a healthy
    SQLite connection between calls (chat/database.py `connections_tidy`).
    """
    return _SocketCall(function, thread_sensitive=False, executor=_SOCKET_THREADS)


class _SocketCall(SyncToAsync[..., Any]):
    """A call on the sockets' threads, their connections tidied before and after."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        connections_tidy()
        try:
            return super().thread_handler(loop, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            connections_tidy()


@on_socket_threads
def socket_conversation_get(conversation_id: Any, user: Any) -> Any:
    """The user's conversation of this id (NotFound otherwise)."""
    return conversation_get(conversation_id=conversation_id, user=user)


@on_socket_threads
def socket_run_start(conversation: Any, content: str, user: Any, replaces: Any, images: Any) -> Any:
    """A socket's post: the message rate counted, then the same run_start as the REST post's."""
    message_rate_check(user)
    return run_start(conversation=conversation, content=content, replaces=replaces, images=images)


@on_socket_threads
def socket_run_cancel(conversation_id: Any, run_id: str) -> Any:
    """Cancel a run of this conversation."""
    return run_cancel_by_id(conversation_id=conversation_id, run_id=run_id)


@on_socket_threads
def socket_tool_call_decide(
    conversation_id: Any,
    execution_id: str,
    user: Any,
    approve: bool,
    reason: str,
    choices: dict[str, Any],
) -> Any:
    """Approve or reject a call of this conversation that waits for a decision."""
    return tool_call_decide(
        execution_id=execution_id,
        user=user,
        approve=approve,
        reason=reason,
        conversation_id=conversation_id,
        **choices,
    )
