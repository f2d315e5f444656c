"""Resources: the domain records that tools create or read."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from tools.fields import StorableCharField, StorableJSONField


class Resource(models.Model):
    """A record a tool made or read (a note, a dataset...), owned by one user."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = StorableCharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="resources"
    )
    title = StorableCharField(max_length=255, blank=True)
    data = StorableJSONField(default=dict, blank=True)
    # The app built on `tools` keeps the audit row; the setting names its model, so
    # that neither `tools` code nor its migrations name that app.
    created_by_execution = models.ForeignKey(
        settings.TOOLS_EXECUTION_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="created_resources",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "kind", "-created_at"], name="resource_owner_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title or self.id}"
