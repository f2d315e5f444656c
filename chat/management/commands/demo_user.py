"""Create the demo user that `make run` prints, once; `--reset` sets its password again.

An existing demo user is left alone: setting its password again (even to the
same one) would sign out every browser tab it has open.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create the demo user for local use and print its name and password."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default=os.environ.get("TOOLCHAT_DEMO_USER", "demo"))
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Set the password (and staff rights) of an existing demo user again.",
        )

    def handle(self, *args: Any, username: str, reset: bool = False, **options: Any) -> None:
        if not settings.DEBUG:
            # A user with a published password has no place on a production server.
            raise CommandError("demo_user runs only with DJANGO_DEBUG=1 (local development).")
        password = os.environ.get("TOOLCHAT_DEMO_PASSWORD", "toolchat-demo")
        user, created = get_user_model().objects.get_or_create(username=username)
        if not created and not reset:
            self.stdout.write(
                f"Demo user {username!r} exists; its password is unchanged "
                f"({password!r} unless you changed it; `manage.py demo_user --reset` sets it)."
            )
            return
        user.set_password(password)
        user.is_staff = user.is_superuser = True
        user.save()
        verb = "Created" if created else "Reset"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} demo user: username={username!r} password={password!r} "
                "(staff, so /admin/ and /audit/ work too)"
            )
        )
