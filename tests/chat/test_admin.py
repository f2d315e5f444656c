"""The admin: every model's pages render with real data, lists cost a fixed number of
queries, and the audit trail cannot be added to, changed or deleted through it."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chat.models import (
    Conversation,
    Message,
    ModelCall,
    Run,
    RunEvent,
    ToolExecution,
)
from tests.chat.audit.test_queries import HOSTILE, SECRET, audited_run, call_with_a_secret
from tests.factories import ConversationFactory, UserFactory
from tools.models import Resource

pytestmark = pytest.mark.django_db

MODELS = {
    "chat/conversation": Conversation,
    "chat/message": Message,
    "chat/run": Run,
    "chat/modelcall": ModelCall,
    "chat/toolexecution": ToolExecution,
    "chat/runevent": RunEvent,
    "tools/resource": Resource,
}
AUDIT_MODELS = [
    "chat/message",
    "chat/run",
    "chat/modelcall",
    "chat/toolexecution",
    "chat/runevent",
]
# The most a changelist may cost: session, user, the page, its count(s) and its filters.
MAX_CHANGELIST_QUERIES = 12


@pytest.fixture
def run() -> Run:
    owner = UserFactory(username="ada")
    return audited_run(ConversationFactory(owner=owner, title="Groceries"))


@pytest.mark.parametrize("route", list(MODELS))
def test_every_changelist_renders(admin_client: Client, run, route):
    response = admin_client.get(f"/admin/{route}/")
    assert response.status_code == 200
    assert MODELS[route].objects.exists()


@pytest.mark.parametrize("route", list(MODELS))
def test_every_change_page_renders(admin_client: Client, run, route):
    for obj in MODELS[route].objects.all():
        response = admin_client.get(f"/admin/{route}/{obj.pk}/change/")
        assert response.status_code == 200, (route, obj)


@pytest.mark.parametrize("route", list(MODELS))
def test_changelists_cost_the_same_queries_for_one_run_or_many(admin_client: Client, route):
    audited_run()
    admin_client.get(f"/admin/{route}/")  # warm the session
    with CaptureQueriesContext(connection) as one:
        assert admin_client.get(f"/admin/{route}/").status_code == 200
    for _ in range(6):
        audited_run()
    with CaptureQueriesContext(connection) as many:
        assert admin_client.get(f"/admin/{route}/").status_code == 200
    assert len(many) == len(one), [q["sql"] for q in many.captured_queries]
    assert len(many) <= MAX_CHANGELIST_QUERIES


@pytest.mark.parametrize("route", AUDIT_MODELS)
def test_audit_rows_cannot_be_added_changed_or_deleted(admin_client: Client, run, route):
    model = MODELS[route]
    obj = model.objects.first()
    assert obj is not None
    before = model.objects.count()

    assert admin_client.get(f"/admin/{route}/add/").status_code == 403
    assert admin_client.post(f"/admin/{route}/add/", {}).status_code == 403
    assert admin_client.post(f"/admin/{route}/{obj.pk}/change/", {}).status_code == 403
    assert admin_client.post(f"/admin/{route}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    admin_client.post(
        f"/admin/{route}/",
        {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
    )

    assert model.objects.count() == before
    page = admin_client.get(f"/admin/{route}/{obj.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    assert "/delete/" not in page.split('id="content-main"')[1]
    listing = admin_client.get(f"/admin/{route}/").content.decode()
    assert f"/admin/{route}/add/" not in listing


def test_a_tool_execution_shows_arguments_raw_result_sent_content_and_error(
    admin_client: Client, run
):
    notes = ToolExecution.objects.get(run=run, name="search_notes")
    calc = ToolExecution.objects.get(run=run, name="calculator")

    html = admin_client.get(f"/admin/chat/toolexecution/{notes.pk}/change/").content.decode()
    assert "&quot;query&quot;: &quot;groceries&quot;" in html  # pretty JSON arguments
    assert "note number 399" in html  # the whole raw result
    assert "[truncated: 200 of" in html  # what the model was sent
    assert "Content sent to the model" in html
    assert "Raw result" in html

    html = admin_client.get(f"/admin/chat/toolexecution/{calc.pk}/change/").content.decode()
    assert "ZeroDivisionError: division by zero" in html
    assert "Traceback (most recent call last):" in html


def test_html_from_tools_is_escaped_in_the_admin(admin_client: Client, run):
    note = ToolExecution.objects.get(run=run, name="record_note")
    escaped = "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;"
    pages = [
        f"/admin/chat/toolexecution/{note.pk}/change/",
        f"/admin/chat/message/{note.message_id}/change/",
        "/admin/chat/message/",
    ]
    for url in pages:
        html = admin_client.get(url).content.decode()
        assert HOSTILE not in html, url
        assert escaped in html or "&lt;script&gt;" in html, url


def test_the_run_page_breaks_latency_down_by_step(admin_client: Client, run):
    html = admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode()

    breakdown = html.split("Latency by step:")[1].split("</table>")[0]
    cells = [
        breakdown.index(text)
        for text in ("With tools", "search_notes", "calculator", "record_note", "Compose")
    ]
    assert cells == sorted(cells)
    for figure in ("118 ms", "451 ms", "17 ms", "2 ms", "5 ms", "64 ms", "312 ms"):
        assert figure in breakdown
    assert f'href="/audit/runs/{run.pk}/"' in html
    # The inlines are there, read-only: no inputs for their rows.
    assert "Model calls" in html
    assert "Tool executions" in html
    assert 'name="model_call_rows-0-latency_ms"' not in html
    assert 'name="tool_executions-0-status"' not in html


def test_a_conversation_lists_its_runs_read_only_and_stays_editable(admin_client: Client, run):
    conversation = run.conversation
    listing = admin_client.get("/admin/chat/conversation/?q=ada").content.decode()
    assert "Groceries" in listing
    assert (
        admin_client.get("/admin/chat/conversation/?q=nobody").content.decode().count("Groceries")
        == 0
    )

    html = admin_client.get(f"/admin/chat/conversation/{conversation.pk}/change/").content.decode()
    assert 'name="title"' in html
    assert 'name="runs-0-status"' not in html
    assert f"/admin/chat/run/{run.pk}/change/" in html


def test_the_conversation_list_counts_messages_and_runs(admin_client: Client, run):
    audited_run(run.conversation)
    response = admin_client.get("/admin/chat/conversation/")
    changelist = response.context["cl"]
    row = next(c for c in changelist.result_list if c.pk == run.conversation_id)
    assert (row.message_count, row.run_count) == (12, 2)


def test_the_message_list_shows_latency_tokens_and_filters_by_role(admin_client: Client, run):
    html = admin_client.get("/admin/chat/message/?role__exact=assistant").content.decode()
    assert "451" in html
    assert "120 / 37" in html
    # Latency and tokens come right after the text (so they are in view at 1280 px).
    headers = html.split("<thead>")[1].split("</thead>")[0]
    columns = ["column-short_content", "column-latency", "column-tokens", "column-model"]
    assert [headers.index(c) for c in columns] == sorted(headers.index(c) for c in columns)
    assert "(calls search_notes, calculator, record_note)" in html
    assert "Find my notes" not in html  # the user message is filtered out


def test_a_resource_links_to_the_tool_call_that_made_it(admin_client: Client, run):
    resource = Resource.objects.get()
    note = ToolExecution.objects.get(run=run, name="record_note")

    for url in ("/admin/tools/resource/", f"/admin/tools/resource/{resource.pk}/change/"):
        html = admin_client.get(url).content.decode()
        assert f'href="/admin/chat/toolexecution/{note.pk}/change/"' in html, url
    assert 'name="created_by_execution"' not in html


def test_non_staff_users_cannot_open_the_admin(client: Client, run):
    client.force_login(UserFactory())
    response = client.get("/admin/chat/toolexecution/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_sensitive_arguments_of_a_tool_call_are_masked_in_the_admin(
    admin_client: Client, run, monkeypatch
):
    message = call_with_a_secret(run, monkeypatch)

    html = admin_client.get(f"/admin/chat/message/{message.pk}/change/").content.decode()
    assert SECRET not in html
    assert "&quot;name&quot;: &quot;sign_in&quot;" in html
    assert "\\&quot;password\\&quot;: \\&quot;***\\&quot;" in html
    assert "ada@example.com" in html  # only the secret goes
    listing = admin_client.get("/admin/chat/message/").content.decode()
    assert SECRET not in listing
    assert "(calls sign_in)" in listing


# --- Branding, the way to the audit, the run's waterfall -------------------------------


def test_the_admin_is_branded_and_links_to_the_audit_and_its_icon(admin_client: Client, run):
    for url in ("/admin/", "/admin/chat/message/", f"/admin/chat/run/{run.pk}/change/"):
        html = admin_client.get(url).content.decode()
        assert "toolchat administration" in html, url
        assert '<a class="audit-link" href="/audit/">Audit</a>' in html, url
        assert '<link rel="icon" href="/static/img/logo.svg" type="image/svg+xml">' in html, url
        assert '<link rel="icon" href="/static/img/favicon.png"' in html, url
    assert (
        "<title>Conversations, runs and their audit trail | toolchat admin</title>"
        in admin_client.get("/admin/").content.decode()
    )


def test_the_icons_the_admin_names_are_there():
    from django.contrib.staticfiles import finders

    for name in ("img/logo.svg", "img/favicon.png"):
        assert finders.find(name), name


def test_the_run_page_shows_its_waterfall(admin_client: Client, run):
    html = admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode()
    waterfall = html.split('data-testid="waterfall"')[1].split("</figure>")[0]
    assert waterfall.count('class="wf-bar"') == 2 + 3  # two model calls, three tools
    assert waterfall.count('class="wf-first-token"') == 2


def test_the_message_list_shows_the_tool_and_links_the_conversation(admin_client: Client, run):
    html = admin_client.get("/admin/chat/message/?role__exact=tool").content.decode()
    notes = ToolExecution.objects.get(run=run, name="search_notes")
    assert (
        f'search_notes<br><span class="quiet" style="overflow-wrap: anywhere">'
        f"{notes.tool_call_id}</span>"
    ) in html
    assert f'href="/admin/chat/conversation/{run.conversation_id}/change/">Groceries</a>' in html


def test_sensitive_arguments_stored_before_a_tool_marked_them_are_masked(
    admin_client: Client, run, monkeypatch
):
    """A row stored unmasked (the parameter was marked sensitive later) is masked when shown."""
    message = call_with_a_secret(run, monkeypatch)
    execution = ToolExecution.objects.create(
        run=run,
        message=message,
        tool_call_id="call_sign_in",
        name="sign_in",
        arguments={"username": "ada@example.com", "password": SECRET},
    )
    RunEvent.objects.create(
        conversation=run.conversation,
        run=run,
        seq=999,
        type="tool_call.started",
        data={"name": "sign_in", "arguments": {"username": "ada", "password": SECRET}},
    )
    event = RunEvent.objects.get(seq=999, conversation=run.conversation)
    pages = [
        f"/admin/chat/toolexecution/{execution.pk}/change/",
        f"/admin/chat/runevent/{event.pk}/change/",
        f"/audit/runs/{run.pk}/",
    ]
    for url in pages:
        html = admin_client.get(url).content.decode()
        assert SECRET not in html, url
        assert "&quot;password&quot;: &quot;***&quot;" in html, url


@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        ("Be <b>brief</b> & kind.", "Be &lt;b&gt;brief&lt;/b&gt; &amp; kind."),
        ("", "none"),
        (None, "not recorded"),
    ],
)
def test_the_run_pages_show_the_system_prompt_the_run_sent(
    admin_client: Client, run, prompt, shown
):
    run.system_prompt = prompt
    run.save(update_fields=["system_prompt"])
    admin = admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode()
    assert shown in admin.split("System prompt:")[1].split("</div>")[0]
    audit = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert shown in audit.split('data-testid="run-system-prompt">')[1].split("</dd>")[0]
    assert "<b>brief</b>" not in admin + audit


def test_an_answers_reasoning_is_shown_escaped_in_the_audit_and_the_admin(
    admin_client: Client, run
):
    answer = Message.objects.filter(run=run, role="assistant").order_by("position").last()
    answer.reasoning = "First <script>x()</script> then & more."
    answer.save(update_fields=["reasoning"])
    shown = "First &lt;script&gt;x()&lt;/script&gt; then &amp; more."
    audit = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    (block,) = audit.split('data-testid="reasoning"')[1:]
    assert shown in block.split("</details>")[0]
    admin = admin_client.get(f"/admin/chat/message/{answer.pk}/change/").content.decode()
    assert shown in admin.split("Reasoning:")[1].split("</div>")[0]
    assert "<script>x()" not in audit + admin


MARKDOWN_ANSWER = (
    "**12 times 7** is `84`:\n\n- see [the table](https://example.com)\n- <script>x()</script>"
)


def test_an_answer_shows_as_formatted_markdown_in_the_audit_and_as_plain_text_in_the_admin(
    admin_client: Client, run
):
    answer = Message.objects.filter(run=run, role="assistant").order_by("position").last()
    answer.content = MARKDOWN_ANSWER
    answer.save(update_fields=["content"])
    audit = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    shown = audit.split(f'id="m{answer.position}"')[1].split('<li class="event')[0]
    # Rendered as the chat renders it, sanitized: no raw syntax, no live script.
    assert "<strong>12 times 7</strong> is <code>84</code>" in shown
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">the table</a>' in shown
    assert "**" not in shown
    assert "&lt;script&gt;x()&lt;/script&gt;" in shown
    assert "<script>x()" not in audit
    # The admin's list of messages shows the words, without the syntax, escaped.
    listed = admin_client.get("/admin/chat/message/?role__exact=assistant").content.decode()
    row = listed.split(f"/admin/chat/message/{answer.pk}/change/")[-1].split("</tr>")[0]
    assert "12 times 7 is 84: see the table" in row, row
    assert "**" not in row
    assert "`" not in row
    assert "<script>x()" not in listed


def test_a_runs_steps_are_one_number_with_one_label_on_every_page(admin_client: Client, run):
    from tests.factories import finished_run

    replay = finished_run(ConversationFactory(owner=run.conversation.owner), replay_of=run)
    # A two-pass run: the call with tools and the composing call are its two steps.
    run_page = admin_client.get(f"/audit/runs/{run.pk}/").content.decode()
    assert '<dt>Steps</dt><dd data-testid="run-steps">2</dd>' in run_page
    compare = admin_client.get(f"/audit/runs/{run.pk}/compare/{replay.pk}/").content.decode()
    assert compare.count('<td class="num" data-label="Steps">2</td>') == 2
    runs = admin_client.get("/admin/chat/run/").content.decode()
    assert "tool steps" not in runs.lower()
    assert runs.count('<td class="field-model_steps">2</td>') == 2
    change = admin_client.get(f"/admin/chat/run/{run.pk}/change/").content.decode()
    assert "tool steps" not in change.lower()
    assert re.search(r"<label>Steps:</label>\s*<div class=\"readonly\">2</div>", change), change
    inline = admin_client.get(
        f"/admin/chat/conversation/{run.conversation_id}/change/"
    ).content.decode()
    assert "tool steps" not in inline.lower()
    assert re.search(r'<td class="field-model_steps">\s*<p>2</p>', inline)


def test_numbers_are_written_one_way_with_thousands_separators_on_every_staff_page(
    admin_client: Client, run
):
    from tests.factories import finished_run

    Run.objects.filter(pk=run.pk).update(latency_ms=1234567)
    ModelCall.objects.filter(run=run).update(latency_ms=2345678, prompt_tokens=13672)
    Message.objects.filter(run=run, role="assistant").update(
        latency_ms=2345678, prompt_tokens=13672
    )
    replay = finished_run(ConversationFactory(owner=run.conversation.owner), replay_of=run)
    pages = {
        "run page": f"/audit/runs/{run.pk}/",
        "runs table": "/audit/?period=hour",
        "compare page": f"/audit/runs/{run.pk}/compare/{replay.pk}/",
        "admin runs": "/admin/chat/run/",
        "admin messages": "/admin/chat/message/",
        "admin model calls": "/admin/chat/modelcall/",
    }
    for name, url in pages.items():
        # What a reader sees: the data attributes are for scripts and tests.
        html = re.sub(r'data-[a-z-]+="[^"]*"', "", admin_client.get(url).content.decode())
        assert "1,234,567" in html or "2,345,678" in html, name
        for raw in ("1234567", "2345678", "13672"):
            assert raw not in html, (name, raw)


def test_staff_add_a_tool_policy_in_the_admin_with_one_pattern_a_line(admin_client: Client):
    from django.contrib.auth.models import Group

    from chat.models import ToolPolicy

    ops = Group.objects.create(name="ops")
    response = admin_client.post(
        "/admin/chat/toolpolicy/add/",
        {"tools": "delete_*\ntracker__*, calculator\n", "decision": "deny", "groups": [ops.pk]},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    rule = ToolPolicy.objects.get()
    assert rule.tools == ["delete_*", "tracker__*", "calculator"]
    assert list(rule.groups.all()) == [ops]
    page = admin_client.get("/admin/chat/toolpolicy/")
    assert "group ops" in page.content.decode()
    change = admin_client.get(f"/admin/chat/toolpolicy/{rule.pk}/change/").content.decode()
    assert "delete_*\ntracker__*\ncalculator" in change


def test_the_admin_refuses_a_pattern_the_api_would_refuse(admin_client: Client):
    from chat.models import ToolPolicy

    response = admin_client.post(
        "/admin/chat/toolpolicy/add/", {"tools": "x" * 129, "decision": "deny"}
    )
    assert response.status_code == 200  # the form again, with the error
    assert "no more than 128 characters" in response.content.decode()
    assert not ToolPolicy.objects.exists()


def test_a_tool_executions_page_shows_the_rule_that_decided_it(admin_client: Client, run):
    execution = ToolExecution.objects.filter(run=run).first()
    ToolExecution.objects.filter(pk=execution.pk).update(policy_decision="deny", policy_rule=4)
    page = admin_client.get(f"/admin/chat/toolexecution/{execution.pk}/change/").content.decode()
    assert 'deny by <a href="/admin/chat/toolpolicy/4/change/">rule 4</a>' in page
