"""The attack suite: the tests that probe toolchat as a hostile client and a faulty world would.

They live beside the features they attack (test files mirror the source);
this table names them, by category, so that they can be run apart
(`make attack`, or `pytest -m attack`) and so that docs/security.md can say
what is tested. `tests/conftest.py` marks every collected test whose node id
matches a pattern here with `attack`, and a test checks that every pattern
still matches a test, so the table cannot silently rot.

A pattern is `path/of/test_file.py` (the whole file) or
`path/of/test_file.py::substring` (tests whose name contains it).
"""

from __future__ import annotations

ATTACKS: dict[str, list[str]] = {
    "another user's ids (BOLA), on every door": [
        "tests/chat/api/test_auth.py",
        "tests/chat/api/test_conversations.py::someone_elses",
        "tests/chat/api/test_conversations.py::only_your_own",
        "tests/chat/api/test_messages.py::someone_elses",
        "tests/chat/api/test_approvals.py::another_users",
        "tests/chat/api/test_tools.py::your_own",
        "tests/chat/engine/test_approval.py::only_by_its_owner",
        "tests/chat/live/test_consumers.py::another_users",
        "tests/chat/live/test_consumers.py::another_conversation",
        "tests/chat/test_selectors.py::only_the_owners",
        "tests/tools/builtin/test_notes.py::another_users",
        "tests/tools/builtin/test_notes.py::users_own",
        "tests/tools/test_context.py::users_own",
    ],
    "cross-site requests and sockets (CSRF, Origin)": [
        "tests/chat/api/test_auth.py::csrf",
        "tests/chat/live/test_consumers.py::origin",
        "tests/chat/live/test_consumers.py::cookie",
        "tests/chat/live/test_live_stack.py::origin_check",
    ],
    "hostile input: NUL, lone surrogates, deep nesting, huge sizes, unknown fields and paths": [
        "tests/chat/api/test_bad_input.py",
        "tests/chat/openai_api/test_bad_input.py",
        "tests/chat/openai_api/test_every_field.py",
        "tests/chat/api/test_regenerate.py::refuses_any_other",
        "tests/chat/api/test_messages.py::over_the_limit",
        "tests/chat/engine/test_hostile_text.py",
        "tests/chat/live/test_fuzz_frames.py",
        "tests/chat/live/test_consumers.py::hostile",
        "tests/chat/live/test_consumers.py::malformed",
        "tests/chat/live/test_consumers.py::oversized",
        "tests/chat/live/test_consumers.py::unrouted",
        "tests/chat/live/test_consumers.py::rest_posts_rules",
        "tests/chat/live/test_consumers.py::refuses_unknown_fields",
        "tests/chat/live/test_consumers.py::not_utf8",
        "tests/chat/live/test_live_stack.py::hostile_frames",
        "tests/test_hostile_surfaces.py",
    ],
    "forged client addresses (forwarding headers)": [
        "tests/chat/telemetry/test_metrics.py::forwarding_header",
        "tests/chat/telemetry/test_metrics.py::forwarded_for_from_loopback",
    ],
    "stored cross-site scripting through what models, tools and users write": [
        "tests/chat/test_markdown.py::nothing_executable",
        "tests/chat/test_markdown.py::remote_images",
        "tests/chat/test_admin.py::escaped",
        "tests/chat/audit/test_waterfall.py::escaped",
        "tests/chat/audit/test_overview.py::escaped",
        "tests/test_pages.py::escaped",
    ],
    "spreadsheet formulas in CSV downloads": [
        "tests/chat/audit/test_overview.py::spreadsheet",
    ],
    "faulty model servers and MCP servers": [
        "tests/chat/llm/test_openai_provider.py::cut",
        "tests/tools/mcp/test_hostile_servers.py",
    ],
    "processes killed mid-turn, and outages": [
        "tests/chat/engine/test_turn_celery.py::killed",
        "tests/tools/mcp/test_mcp_turns.py::kill",
        "tests/chat/engine/test_broker_outage.py",
        "tests/chat/engine/test_database_outage.py",
        "tests/chat/live/test_ws_auth.py",
        "tests/chat/live/test_shared_limits.py",
    ],
    "governed tools: denied calls, who may change the rules and decide": [
        "tests/chat/api/test_policies.py::not_staff",
        "tests/chat/api/test_policies.py::bad_rule",
        "tests/chat/test_policies.py::denied",
        "tests/chat/engine/test_replay.py::policy_denies",
        "tests/tools/mcp/test_mcp_turns.py::policy_denies",
        "tests/chat/test_policies.py::another_persons_rule",
        "tests/chat/api/test_approvals.py::another_users_standing",
        "tests/chat/api/test_approvals.py::staff_see_all",
        "tests/chat/api/test_approvals.py::bad_approval",
    ],
    "budgets: who may change them, refusals through every door, and races": [
        "tests/chat/api/test_budgets.py::cannot_read_or_raise",
        "tests/chat/api/test_budgets.py::429",
        "tests/chat/api/test_budgets.py::openais_shape",
        "tests/chat/api/test_budgets.py::each_persons_own",
        "tests/chat/live/test_consumers.py::over_a_hard_budget",
        "tests/chat/test_budgets.py::refused_naming",
        "tests/chat/test_budgets.py::bad_limit",
        "tests/chat/test_budgets.py::fifty_posts",
        "tests/chat/test_budgets.py::two_web_processes",
        "tests/chat/test_budgets.py::two_workers",
    ],
    "approval races": [
        "tests/chat/engine/test_approval.py::decided_once",
        "tests/chat/engine/test_approval.py::at_once",
        "tests/chat/engine/test_cancel_race.py",
        "tests/chat/api/test_approvals.py",
    ],
}


def matches(nodeid: str, pattern: str) -> bool:
    """Whether a collected test's node id falls under a pattern of the table."""
    path, _, name = pattern.partition("::")
    test_path, _, test_name = nodeid.partition("::")
    return test_path == path and name in test_name
