"""Which calls of which tools a person's runs may make: the tool policies, read and applied.

The rules (chat/models/policies.py) that cover a person are read once per
claim of a run, in one query (`run_policies`), and decide each call of the
model's answer (chat/engine/answer_store.py) and which tools a model call
offers (chat/engine/request.py):

- of the rules whose patterns match the tool's name, `deny` wins over `ask`
  and `ask` over `allow`, whatever their order; of equal rules, the oldest is
  named as the one that decided;
- a tool no rule covers keeps its own `requires_approval` (`ask` when the
  call needs it, else `allow`), unless `TOOLCHAT_TOOLS_DEFAULT=deny`: then
  only what a rule allows (or asks for) runs;
- a denied tool is not offered; a call to it anyway is answered with a
  refusal the model reads, naming the rule, and never runs;
- a call decided `ask` runs without asking when its owner said yes to the tool
  in this conversation (a standing approval, for any arguments or for these).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import re
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from chat.models import PolicyDecision, Run, StandingApproval, ToolPolicy
from tools.registry import registry as tool_registry

# How strong a decision is: of the rules that cover a call, the strongest decides.
_STRENGTH = {PolicyDecision.ALLOW: 0, PolicyDecision.ASK: 1, PolicyDecision.DENY: 2}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What was decided for one call, and by which rule (None: no rule covered it)."""

    decision: PolicyDecision
    rule: int | None
    note: str = ""

    def reason(self) -> str:
        """The verdict in words, as the audit and the model read it."""
        if self.rule is None:
            return "no rule allows this tool (TOOLCHAT_TOOLS_DEFAULT=deny)"
        return f"tool policy rule {self.rule}" + (f": {self.note}" if self.note else "")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A stored rule, as the decisions read it: its id, its patterns as one regex, its decision."""

    id: int
    matches: re.Pattern[str]
    decision: PolicyDecision
    note: str

    @classmethod
    def of(cls, rule_id: int, patterns: list[str], decision: str, note: str) -> Rule:
        joined = "|".join(fnmatch.translate(str(pattern)) for pattern in patterns) or "(?!)"
        return cls(rule_id, re.compile(joined), PolicyDecision(decision), note)


@dataclasses.dataclass(frozen=True)
class ToolPolicies:
    """The rules that cover one person, and what no rule decides."""

    rules: tuple[Rule, ...] = ()
    default_deny: bool = False

    def covering(self, name: str) -> Verdict | None:
        """The strongest rule's verdict for the tool `name`; None when no rule covers it."""
        best: Rule | None = None
        for rule in self.rules:
            if rule.matches.match(name) and (
                best is None or _STRENGTH[rule.decision] > _STRENGTH[best.decision]
            ):
                best = rule
        return None if best is None else Verdict(best.decision, best.id, best.note)

    def verdict(self, name: str, arguments: Any) -> Verdict:
        """What is decided for a call of `name` with its decoded `arguments`."""
        covered = self.covering(name)
        if covered is not None:
            return covered
        if self.default_deny:
            return Verdict(PolicyDecision.DENY, None)
        spec = tool_registry.get(name)
        asks = spec is not None and spec.needs_approval(arguments)
        return Verdict(PolicyDecision.ASK if asks else PolicyDecision.ALLOW, None)

    def offers(self, name: str) -> bool:
        """Whether a model call offers the tool `name`: it is not denied (whatever the arguments)."""
        covered = self.covering(name)
        if covered is None:
            return not self.default_deny
        return covered.decision != PolicyDecision.DENY

    def offered(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Of OpenAI `tools` entries, those offered (the same list when nothing can deny)."""
        if not self.rules and not self.default_deny:
            return tools
        return [tool for tool in tools if self.offers(tool["function"]["name"])]


def arguments_digest(arguments: Any) -> str:
    """A call's arguments as a standing approval matches them: SHA-256 of their canonical JSON."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def standing_approvals_matching(
    run: Run, calls: list[tuple[str, str, Any]]
) -> dict[str, StandingApproval]:
    """Of `(call id, tool, decoded arguments)`, the calls a standing approval of the run's
    conversation covers, by call id, with the approval (the oldest that covers it)."""
    if not calls:
        return {}
    active = StandingApproval.objects.filter(
        conversation_id=run.conversation_id,
        tool__in={name for _, name, _ in calls},
        withdrawn_at__isnull=True,
    ).order_by("id")
    approvals = list(active)
    matched: dict[str, StandingApproval] = {}
    for call_id, name, arguments in calls:
        digest = arguments_digest(arguments)
        for approval in approvals:
            if approval.tool == name and approval.arguments_digest in ("", digest):
                matched[call_id] = approval
                break
    return matched


@dataclasses.dataclass(frozen=True)
class Judged:
    """A model answer's calls, as the run's policies decided them."""

    client: list[dict[str, Any]]  # calls of the /v1 client's own tools: not ours to decide
    ours: list[dict[str, Any]]  # the rest, each decided
    verdicts: dict[str, Verdict]  # by call id, for each call of ours
    standing: dict[str, StandingApproval]  # by call id: asked, and said yes to already
    held: list[dict[str, Any]]  # calls that wait for a person
    denied: list[dict[str, Any]]  # calls a policy refuses


def calls_judged(
    run: Run, policies: ToolPolicies, calls: list[dict[str, Any]], *, theirs: frozenset[str]
) -> Judged:
    """Decide an answer's `calls` (OpenAI shape) under `policies`; `theirs` names the client's tools."""
    client = [call for call in calls if call["function"]["name"] in theirs]
    ours = [call for call in calls if call not in client]
    arguments = {call["id"]: decoded_arguments(call["function"]["arguments"]) for call in ours}
    verdicts = {
        call["id"]: policies.verdict(call["function"]["name"], arguments[call["id"]])
        for call in ours
    }
    # A run whose calls run nothing (a replay with recorded tools) needs no person's approval.
    asking = [
        call
        for call in ours
        if run.sources.tools_run and verdicts[call["id"]].decision == PolicyDecision.ASK
    ]
    standing = standing_approvals_matching(
        run, [(call["id"], call["function"]["name"], arguments[call["id"]]) for call in asking]
    )
    held = [call for call in asking if call["id"] not in standing]
    denied = [call for call in ours if verdicts[call["id"]].decision == PolicyDecision.DENY]
    return Judged(client, ours, verdicts, standing, held, denied)


def decoded_arguments(arguments: str) -> Any:
    """A call's arguments as JSON, or None when they are not valid JSON."""
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return None


def policies_for(user_id: Any) -> ToolPolicies:
    """The rules that cover the user (theirs, their groups', everyone's), in one query."""
    people = ToolPolicy.users.through.objects.filter(toolpolicy_id=OuterRef("pk"))
    groups = ToolPolicy.groups.through.objects.filter(toolpolicy_id=OuterRef("pk"))
    covered = (
        Q(~Exists(people), ~Exists(groups))
        | Exists(people.filter(user_id=user_id))
        | Exists(groups.filter(group__user=user_id))
    )
    rows = ToolPolicy.objects.filter(covered).order_by("id")
    rules = tuple(
        Rule.of(rule_id, tools, decision, note)
        for rule_id, tools, decision, note in rows.values_list("id", "tools", "decision", "note")
    )
    return ToolPolicies(rules, default_deny=settings.TOOLCHAT_TOOLS_DEFAULT == "deny")


def run_policies(run: Run) -> ToolPolicies:
    """The policies of the run's owner: read with its claim (chat/engine/claim_read.py), or now."""
    kept: ToolPolicies | None = run.__dict__.get(_KEPT)
    if kept is None:
        kept = policies_for(run.conversation.owner_id)
        run.__dict__[_KEPT] = kept
    return kept


def policies_keep(run: Run, rows: Any) -> None:
    """Keep on the run the rules its claim read: `[[id, tools, decision, note], ...]` as JSON."""
    listed = json.loads(rows) if isinstance(rows, str | bytes) else rows or []
    rules = tuple(Rule.of(*row) for row in sorted(listed, key=lambda row: row[0]))
    run.__dict__[_KEPT] = ToolPolicies(
        rules, default_deny=settings.TOOLCHAT_TOOLS_DEFAULT == "deny"
    )


_KEPT = "_tool_policies"
