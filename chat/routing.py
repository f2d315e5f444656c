"""WebSocket routes (the consumer arrives with the live events issue)."""

from typing import Any

websocket_urlpatterns: list[Any] = []
