"""Connect to the MCP servers of TOOLCHAT_MCP_CONFIG and say what each offers, or why not."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools import mcp


class Command(BaseCommand):
    help = (
        "Check TOOLCHAT_MCP_CONFIG: connect to each enabled server, list its tools as the "
        "model is offered them, and show the errors of those that do not answer."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("servers", nargs="*", help="Only these servers (default: all).")

    def handle(self, *args: Any, **options: Any) -> None:
        hub = mcp.active_hub()
        if hub is None:
            path = settings.TOOLCHAT_MCP_CONFIG
            self.stdout.write(
                f"TOOLCHAT_MCP_CONFIG={path!r} names no enabled server."
                if path
                else "TOOLCHAT_MCP_CONFIG is not set: no MCP servers."
            )
            return
        wanted = options["servers"] or None
        known = {status["name"] for status in hub.status()}
        unknown = sorted(set(wanted or ()) - known)
        if unknown:
            raise CommandError(
                f"No enabled server called {', '.join(unknown)}; "
                f"configured: {', '.join(sorted(known)) or 'none'}."
            )
        hub.refresh(wanted)
        failed = False
        for status in hub.status():
            if wanted and status["name"] not in wanted:
                continue
            self.stdout.write(
                self.style.MIGRATE_HEADING(f"{status['name']} ({status['transport']}): ")
                + status["where"]
            )
            if status["error"]:
                failed = True
                self.stdout.write(self.style.ERROR(f"  {status['error']}"))
                continue
            for name in status["tools"]:
                self.stdout.write(f"  {name}")
            for tool, reason in status["skipped"].items():
                self.stdout.write(self.style.WARNING(f"  left out: {tool}: {reason}"))
            if not status["tools"] and not status["skipped"]:
                self.stdout.write("  (no tools)")
        for name in hub.disabled:
            self.stdout.write(f"{name}: disabled")
        if failed:
            raise CommandError("Some MCP servers did not answer.")
