"""Content negotiation that answers "who are you" before "what can I send you"."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class AuthFirstNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that a client the view would refuse hears that first.

    DRF negotiates before it authenticates, so an anonymous request with an
    Accept header no view offers got 406 where the API promises 401.
    """

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        """DRF's choice; on no match, the view's permission check goes first (401/403)."""
        try:
            chosen: tuple[BaseRenderer, str] = super().select_renderer(
                request, list(renderers), format_suffix
            )
        except exceptions.NotAcceptable:
            view = (getattr(request, "parser_context", None) or {}).get("view")
            if view is not None:
                view.check_permissions(request)
            raise
        return chosen
