"""Queue again the runs whose workers died (what Celery beat does every TOOLCHAT_RECOVER_S)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.engine.recovery import runs_recover


class Command(BaseCommand):
    help = "Re-queue active runs that show no sign of life (a dead worker, a lost task)."

    def handle(self, *args: Any, **options: Any) -> None:
        recovered = runs_recover()
        self.stdout.write(f"Re-queued {len(recovered)} run(s).")
        for run_id in recovered:
            self.stdout.write(f"  {run_id}")
