"""Keep the tool policies and budget limits in a file: `load FILE` replaces them, `dump FILE` writes them.

The file's format is in docs/governance.md; `-` is standard input or output.
A file that does not pass is refused whole, naming the entry and key, and the
stored rules and limits stay as they were. A key the file leaves out
(`rules` or `limits`) leaves those as they are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.exceptions import InvalidInput
from chat.services.policies import policies_dump, policies_replace


class Command(BaseCommand):
    help = (
        "Replace the tool policies and budget limits from a JSON file (load), "
        "or write them to one (dump)."
    )

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
        parts = []
        if loaded.rules is not None:
            count = len(loaded.rules)
            parts.append(f"{count} tool polic{'y' if count == 1 else 'ies'}")
        if loaded.limits is not None:
            count = len(loaded.limits)
            parts.append(f"{count} budget limit{'' if count == 1 else 's'}")
        self.stderr.write(f"Loaded {' and '.join(parts) or 'nothing (the file is empty)'}.")
