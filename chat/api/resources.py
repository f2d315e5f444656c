"""Resources: the records tools made or read (notes, datasets), as a resource card links to them."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat.api import docs
from chat.selectors import resource_get
from tools.models import Resource


class ResourceSerializer(serializers.ModelSerializer[Resource]):
    """A record a tool made or read, with its data."""

    class Meta:
        model = Resource
        fields = ["id", "kind", "title", "data", "created_at", "updated_at", "created_by_execution"]
        extra_kwargs = {
            "created_by_execution": {
                "help_text": "The tool call that made it (GET /api/v1/tool-executions/)."
            }
        }


class ResourceDetailApi(APIView):
    """One of the user's resources."""

    @extend_schema(
        tags=["resources"],
        operation_id="resources_retrieve",
        summary="Read a resource",
        description="A note, a dataset or another record a tool made or read. Someone else's "
        "is a 404.",
        parameters=[docs.path_id("resource_id", "The resource (a tool message's resource_id).")],
        responses={200: ResourceSerializer, **docs.errors(404)},
        examples=[
            docs.example(
                "A note",
                {
                    "id": "7d9e6f2a-3c1b-4e8f-9a0d-5b6c7d8e9f01",
                    "kind": "note",
                    "title": "Boiler serviced",
                    "data": {"title": "Boiler serviced", "body": ""},
                    "created_at": "2026-11-23T09:14:03.120000Z",
                    "updated_at": "2026-11-23T09:14:03.120000Z",
                    "created_by_execution": "0b3d5f7a-9c1e-4a2b-8d6f-1e3a5c7b9d02",
                },
            )
        ],
    )
    def get(self, request: Request, resource_id: uuid.UUID) -> Response:
        """The resource, if it is the user's."""
        resource: Any = resource_get(resource_id=resource_id, user=request.user)
        return Response(ResourceSerializer(resource).data)
