"""Tool policies: which calls of which tools, for whom, run, wait for a person, or are refused.

A rule covers tools by name patterns (shell-style globs over the registered
names: `notes__*`, `delete_*`, an MCP server's `<server>__*`) and people (its
users and its groups; neither covers everyone), and decides `allow`, `ask` or
`deny`. Of the rules that cover a call, `deny` wins over `ask` and `ask` over
`allow`, whatever their order (chat/policies.py decides; docs/governance.md).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from tools.fields import StorableCharField, StorableJSONField, StorableTextField

# The most patterns one rule may list, and the longest pattern: a rule is read at every turn.
MAX_RULE_PATTERNS = 50
MAX_PATTERN_CHARS = 128


class PolicyDecision(models.TextChoices):
    """What a rule decides for the calls it covers; the order is the precedence, weakest first."""

    ALLOW = "allow", "Allow: run without asking"
    ASK = "ask", "Ask: wait for the owner's approval"
    DENY = "deny", "Deny: never offered, a call is refused"


class Covering(models.Model):
    """Whom a rule or a budget limit covers: its users and its groups; neither, everyone."""

    users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="+",
        help_text="The people it covers; with no users and no groups, everyone.",
    )
    groups = models.ManyToManyField(
        Group, blank=True, related_name="+", help_text="The groups whose members it covers."
    )

    class Meta:
        abstract = True


class ToolPolicy(Covering):
    """One rule: tool name patterns by who → allow, ask or deny."""

    tools = models.JSONField(
        help_text='Tool name patterns, shell-style globs: ["delete_*", "tracker__*"].'
    )
    decision = models.CharField(max_length=8, choices=PolicyDecision.choices)
    note = StorableTextField(blank=True, max_length=500, help_text="Why the rule exists.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "tool policy"
        verbose_name_plural = "tool policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(decision__in=PolicyDecision.values), name="toolpolicy_decision_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.decision} {', '.join(self.tools or [])}"


class StandingApproval(models.Model):
    """A person's yes to a tool in one conversation: later calls of it run without asking.

    Made by approving a call "for this conversation" (chat/services/approvals.py);
    with `arguments_digest` set, only calls with the same arguments are covered
    (their canonical JSON's SHA-256: the arguments themselves may hold a tool's
    sensitive values, which are kept nowhere but in the call). It ends with its
    conversation, or when withdrawn (the row stays: calls it allowed name it).
    """

    conversation = models.ForeignKey(
        "chat.Conversation", on_delete=models.CASCADE, related_name="standing_approvals"
    )
    tool = StorableCharField(max_length=64)
    arguments = StorableJSONField(
        null=True, blank=True, help_text="The arguments it covers, masked; null: any arguments."
    )
    arguments_digest = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_from = models.ForeignKey(
        "chat.ToolExecution",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The call whose approval made it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["conversation", "tool"],
                condition=Q(withdrawn_at__isnull=True),
                name="standing_active",
            )
        ]

    def __str__(self) -> str:
        scope = "these arguments" if self.arguments_digest else "any arguments"
        return f"#{self.pk} {self.tool} ({scope})"
