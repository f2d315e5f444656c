"""The probe of bench/turn_timeline.py, loaded by every Python process started with this folder
on PYTHONPATH; it does nothing unless TOOLCHAT_TIMELINE_LOG names a file.

Once Django's apps are ready (a thread polls for it: a server and a worker
set Django up at different points), it wraps the engine's steps, the live
events' sends, the WebSocket consumer's sends and every SQL statement, and
appends one line per entry and exit to the log: wall time, thread, label.
Measurement only: it adds its own cost to every step it wraps.
"""

from __future__ import annotations

import os

if os.environ.get("TOOLCHAT_TIMELINE_LOG"):
    import threading

    def _install() -> None:
        import time

        from django.apps import apps

        while not apps.ready:
            time.sleep(0.05)
        import timeline_probe

        timeline_probe.install(os.environ["TOOLCHAT_TIMELINE_LOG"])

    threading.Thread(target=_install, name="timeline-probe", daemon=True).start()
