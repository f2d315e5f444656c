"""toolchat's JSON configuration files (MCP servers, model providers): read, and secrets filled.

Both files keep secrets out of the file: `${NAME}` is replaced by the environment
variable NAME when the file is read, and a missing one is a configuration error
naming the key that asked for it, never a value. What a `${NAME}` filled in is
remembered, so that messages can be cleaned of it (`redacted`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

VARIABLE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def json_file_read(path: str | os.PathLike[str], label: str) -> Any:
    """The JSON document at `path`; a missing, unreadable or invalid file is an error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImproperlyConfigured(f"{label}: there is no such file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(f"{label}: the file cannot be read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(
            f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        ) from None


class EnvironmentFiller:
    """Fills `${NAME}` from the environment, and remembers each value it put in (a secret)."""

    def __init__(self, where: str, environ: Mapping[str, str]) -> None:
        self.where = where
        self.environ = environ
        self.secrets: set[str] = set()

    def fill(self, value: str, key: str) -> str:
        """The value with its variables filled; an unset one is an error naming the key."""

        def variable(match: re.Match[str]) -> str:
            if match.group(1) not in self.environ:
                raise ImproperlyConfigured(
                    f"{self.where}: {key} names the environment variable ${{{match.group(1)}}}, "
                    "which is not set."
                )
            self.secrets.add(self.environ[match.group(1)])
            return self.environ[match.group(1)]

        return VARIABLE_RE.sub(variable, value)

    def strings(self, entry: Mapping[str, Any], key: str) -> dict[str, str]:
        """An object of strings (env, headers), each filled."""
        value = entry.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ImproperlyConfigured(f"{self.where}: {key} must be an object of strings.")
        return {k: self.fill(v, f"{key}.{k}") for k, v in value.items()}


def url_without_secrets(url: str) -> str:
    """The URL without credentials (user:password@) and without its query and fragment."""
    without_user = re.sub(r"^(https?://)[^/@]*@", r"\1", url)
    return without_user.split("?", 1)[0].split("#", 1)[0]


def redacted(text: str, secrets: Iterable[str]) -> str:
    """`text` without these secrets, and with every URL in it stripped of its credentials."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return re.sub(r"https?://[^\s'\"<>]+", lambda match: url_without_secrets(match.group(0)), text)
