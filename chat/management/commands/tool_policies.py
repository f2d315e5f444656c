"""Keep the tool policies in a file: `load FILE` replaces the stored rules, `dump FILE` writes them.

The file's format is in docs/governance.md; `-` is standard input or output.
A file that does not pass is refused whole, naming the entry and key, and the
stored rules stay as they were.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.exceptions import InvalidInput
from chat.services.policies import policies_dump, policies_replace


class Command(BaseCommand):
    help = "Replace the tool policies from a JSON file (load), or write them to one (dump)."

    def add_arguments(self, parser: CommandParser) -> None:
        """`load FILE` or `dump FILE`."""
        parser.add_argument("action", choices=["load", "dump"])
        parser.add_argument("file", help="The JSON file ('-': standard input or output).")

    def handle(self, *args: object, **options: str) -> None:
        """Load or dump, as asked."""
        if options["action"] == "dump":
            self._dump(options["file"])
        else:
            self._load(options["file"])

    def _dump(self, file: str) -> None:
        text = json.dumps(policies_dump(), indent=2, ensure_ascii=False) + "\n"
        if file == "-":
            self.stdout.write(text, ending="")
        else:
            Path(file).write_text(text, encoding="utf-8")
            self.stderr.write(f"Wrote the tool policies to {file}.")

    def _load(self, file: str) -> None:
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
            document = json.loads(text)
        except OSError as exc:
            raise CommandError(f"{file}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise CommandError(f"{file}: not a JSON file ({exc}).") from None
        try:
            loaded = policies_replace(document=document)
        except InvalidInput as exc:
            raise CommandError(f"{file}: {exc.message}; nothing was changed.") from None
        self.stderr.write(f"Loaded {len(loaded)} tool polic{'y' if len(loaded) == 1 else 'ies'}.")
