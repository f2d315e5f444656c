"""WebSocket routes: a conversation's socket; anything else is closed with 4404."""

from django.urls import path, re_path

from chat.live.consumers import ConversationConsumer, UnroutedConsumer

websocket_urlpatterns = [
    path(
        "ws/conversations/<uuid:conversation_id>/",
        ConversationConsumer.as_asgi(),
        name="ws-conversation",
    ),
    # Without it, Channels' router raises for an unknown path: a 500 and a traceback.
    re_path(r"", UnroutedConsumer.as_asgi()),
]
