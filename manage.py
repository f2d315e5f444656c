#!/usr/bin/env python
"""Django's command-line utility for toolchat."""

import os
import sys


def main() -> None:
    """Run an administrative task; a mistake in the configuration is one line, not a traceback."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings.base")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # The message names the setting, the file's server and key, or the variable to set.
        sys.exit(f"ImproperlyConfigured: {exc}")


if __name__ == "__main__":
    main()
