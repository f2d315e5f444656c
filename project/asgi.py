"""ASGI entry point: HTTP goes to Django, WebSockets to Channels' router."""

import os

from project.handler import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.base")

# Django must be set up before anything imports models (the routing below does).
# Django's handler, with /v1/ through a shorter middleware chain (see the module).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.engine.recovery import start_in_process_recovery  # noqa: E402
from chat.live.routing import websocket_urlpatterns  # noqa: E402
from chat.live.ws_auth import websocket_application  # noqa: E402
from project.collector import collector_freeze  # noqa: E402
from project.request_threads import KeptRequestThreads  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Each request's sync code on a thread kept between requests: see the module.
        "http": KeptRequestThreads(django_asgi_app),
        # Origin-checked and authenticated: see chat/live/ws_auth.py.
        "websocket": websocket_application(URLRouter(websocket_urlpatterns)),
    }
)

# Without Redis the runs execute in this process: after a restart, pick up the
# ones that were cut off (with Redis, Celery beat does this).
start_in_process_recovery()

# Last: what this process loaded stays out of the collector's full passes.
collector_freeze()
