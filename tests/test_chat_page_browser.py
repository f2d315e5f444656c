"""The chat page's rough edges, each in a real browser against a real uvicorn.

The server runs the offline model with in-process tasks on the test database.
Screenshots go to screenshots/ (gitignored): chat-header-375.png, chat-thread-header-375.png,
chat-over-limit.png, chat-slow-socket.png, chat-settings.png,
chat-settings-375.png, chat-reasoning.png.
"""

from __future__ import annotations

import contextlib
import re
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command

from tests.assertions import wait_until_on_page
from tests.factories import UserFactory
from tests.test_chat_ui_browser import PASSWORD, ask, log_in, new_conversation

if TYPE_CHECKING:
    from playwright.sync_api import Page, WebSocketRoute

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect
PlaywrightTimeoutError = pytest.importorskip("playwright.sync_api").TimeoutError

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

# A network where the socket takes 1.5 s to open: the window in which a new
# conversation's first message used to be refused with "Not connected yet".
SLOW_SOCKET = """
(() => {
  const Real = window.WebSocket;
  function Slow(url, protocols) {
    const self = this;
    this.readyState = 0;
    this.send = (data) => {
      if (self.readyState !== 1) throw new Error("InvalidStateError: still connecting");
      self.real.send(data);
    };
    this.close = (code, reason) => {
      self.closed = true;
      if (self.real) self.real.close(code, reason); else self.readyState = 3;
    };
    setTimeout(() => {
      if (self.closed) return;
      const real = (self.real = new Real(url, protocols));
      real.onopen = (e) => { self.readyState = 1; if (self.onopen) self.onopen(e); };
      real.onmessage = (e) => { if (self.onmessage) self.onmessage(e); };
      real.onerror = (e) => { if (self.onerror) self.onerror(e); };
      real.onclose = (e) => { self.readyState = 3; if (self.onclose) self.onclose(e); };
    }, 1500);
  }
  Object.assign(Slow, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
  window.WebSocket = Slow;
})();
"""


def test_at_375_px_a_staff_user_sees_their_name_and_log_out(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    UserFactory(username="grace-hopper", is_staff=True)
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server, username="grace-hopper")
    for item in (page.get_by_text("grace-hopper"), page.get_by_role("button", name="Log out")):
        expect(item).to_be_visible()
        box = item.bounding_box()
        assert box is not None
        assert 0 <= box["x"] <= box["x"] + box["width"] <= 375, box
    expect(page.get_by_role("link", name="Audit")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=screenshots_dir / "chat-header-375.png")


def test_at_375_px_the_conversations_title_is_read_whole_above_its_buttons(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    new_conversation(page, "two_pass")
    ask(page, "what is 2**10")
    title = page.locator("#thread-title")
    expect(title).to_have_text("what is 2**10")
    expect(page.locator(".msg-assistant .bubble").last).to_contain_text("1024")
    # The whole title shows (it was cut to "w…" beside Conversations, Export and ⚙).
    assert title.evaluate("el => el.scrollWidth <= el.clientWidth")
    header = page.locator(".thread-header")
    for control in (
        page.get_by_role("button", name="Conversations"),
        page.locator("#export"),
        page.locator("#conversation-settings summary"),
    ):
        expect(control).to_be_visible()
        box, bounds = control.bounding_box(), header.bounding_box()
        assert box is not None
        assert bounds is not None
        assert 0 <= box["x"] <= box["x"] + box["width"] <= 375, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    header.screenshot(path=screenshots_dir / "chat-thread-header-375.png")


def test_make_runs_demo_user_step_does_not_sign_the_demo_user_out(
    asgi_server: str, page: Page, settings
):
    settings.DEBUG = True  # the command refuses to run without it
    call_command("demo_user", stdout=StringIO())
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill("toolchat-demo")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{asgi_server}/")

    call_command("demo_user", stdout=StringIO())  # the next `make run`
    page.reload()
    expect(page).to_have_url(f"{asgi_server}/")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()


def test_the_composer_shrinks_back_after_a_long_message_is_sent(asgi_server: str, page: Page):
    log_in(page, asgi_server)
    new_conversation(page)
    box = page.get_by_label("Message", exact=True)
    empty_height = box.bounding_box()["height"]
    box.fill("\n".join(f"line {n}" for n in range(20)) + "\nwhat is 2+2")
    assert box.bounding_box()["height"] > empty_height + 100
    box.press("Enter")
    expect(page.locator(".msg-user").last).to_contain_text("line 19")
    expect(box).to_have_value("")
    assert box.bounding_box()["height"] <= empty_height + 2
    # The run ends before the test does (its rows are flushed after it).
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("4")


def test_a_message_over_the_limit_is_not_cut_and_the_user_is_told(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    from django.conf import settings

    limit = settings.MAX_MESSAGE_CHARS
    log_in(page, asgi_server)
    new_conversation(page)
    box = page.get_by_label("Message", exact=True)
    box.fill("x" * (limit + 10))  # what a paste does: one input event
    error = page.locator("#composer-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text(f"the limit is {limit:,}")
    expect(error).to_contain_text("Shorten it by 10")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    assert page.evaluate("document.getElementById('composer-input').value.length") == limit + 10
    page.screenshot(path=screenshots_dir / "chat-over-limit.png")
    box.press("End")
    for _ in range(10):
        box.press("Backspace")
    expect(error).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def test_a_message_sent_before_the_socket_opens_waits_for_it(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    page.add_init_script(SLOW_SOCKET)
    log_in(page, asgi_server)
    page.get_by_label("Mode").select_option("two_pass")
    page.get_by_role("button", name="New conversation").click()
    ask(page, "what is 12*7")  # at once, while the socket is still connecting
    expect(page.locator(".msg-user").last).to_contain_text("what is 12*7")
    expect(page.locator("#composer-error")).to_be_hidden()
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    expect(page.locator("#composer-error")).to_be_hidden()
    page.screenshot(path=screenshots_dir / "chat-slow-socket.png")


def flush_tasks(page: Page) -> None:
    """Let the page run what its finished requests scheduled (no timer of ours to wait on)."""
    page.evaluate("() => new Promise((done) => setTimeout(() => setTimeout(done, 0), 0))")


@pytest.mark.parametrize("first", ["list", "create"])
def test_a_first_message_sent_before_the_conversation_list_arrives_is_answered_in_place(
    asgi_server: str, page: Page, first: str
):
    """A slow first load of the sidebar must not reopen the page over what the user did.

    The list is held back while the user starts a conversation and sends its
    first message; whichever of the list and the new conversation arrives
    first, the thread shows the question and its answer, and the sidebar
    lists the conversation.
    """
    held: dict[str, object] = {}

    def hold(route, request) -> None:  # type: ignore[no-untyped-def]
        if request.method == "GET" and "list" not in held:
            held["list"] = route
        elif request.method == "POST" and "create" not in held:
            held["create"] = route
        else:
            route.continue_()

    page.route(re.compile(r".*/api/v1/conversations/(\?.*)?$"), hold)
    UserFactory(username="ada")
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{asgi_server}/")
    page.wait_for_load_state("domcontentloaded")  # the page's script is running
    page.get_by_role("button", name="New conversation").click()
    expect(page.get_by_label("Message", exact=True)).to_be_enabled()
    ask(page, "what is 12*7")
    order = [first, "create" if first == "list" else "list"]
    for name in order:
        wait_until_on_page(page, lambda name=name: name in held, what=f"the {name} request")
        with page.expect_request_finished(lambda r: "/api/v1/conversations/" in r.url):
            held.pop(name).continue_()  # type: ignore[attr-defined]
        flush_tasks(page)
    page.unroute(re.compile(r".*/api/v1/conversations/(\?.*)?$"))

    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    expect(page).to_have_url(re.compile(r"#[0-9a-f-]{36}$"))
    expect(page.locator("#conversation-list .conversation-link")).to_have_count(1)


def test_a_second_tab_sees_the_users_message_and_the_answer_live(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "what is 2+2")  # the first message creates the conversation
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("4")
    other = page.context.new_page()  # the same user's second tab
    other.goto(page.url)
    expect(other.locator("#connection")).to_have_text("Live")

    ask(page, "what is 12*7")
    expect(other.locator(".msg-user")).to_have_count(2)
    expect(other.locator(".msg-user").last).to_contain_text("what is 12*7")
    expect(other.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    # The tab that sent it shows it once, whichever came first: the event or the ack.
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    expect(page.locator(".msg-user")).to_have_count(2)
    expect(page.locator(".msg-user.pending")).to_have_count(0)
    other.screenshot(path=screenshots_dir / "chat-second-tab.png")


def test_a_still_in_progress_refusal_goes_when_that_run_ends(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "what is 2+2")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("4")
    other = page.context.new_page()  # a second tab that has not heard of the run yet
    held: list[str | bytes] = []
    hold = {"on": False}
    routes: list[WebSocketRoute] = []

    def route(ws: WebSocketRoute) -> None:
        routes.append(ws)
        server = ws.connect_to_server()

        def to_page(message: str | bytes) -> None:
            # The run's events wait (as on a slow link); refusals and acks pass.
            if hold["on"] and '"seq"' in str(message):
                held.append(message)
            else:
                ws.send(message)

        server.on_message(to_page)

    other.route_web_socket(re.compile(r"/ws/conversations/"), route)
    other.goto(page.url)
    expect(other.locator("#connection")).to_have_text("Live")
    hold["on"] = True
    ask(page, "generate a dataset of 10000 rows")
    expect(page.locator(".tool-progress-text").last).to_contain_text("Generat")
    ask(other, "what is 12*7")
    error = other.locator("#composer-error")
    expect(error).to_contain_text("still in progress")
    other.screenshot(path=screenshots_dir / "chat-second-tab-busy.png")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator(".notice-info")).to_contain_text("cancelled")
    # The run's end has come to this tab's socket, and is held there: the run is
    # over for the server, and what the page had to run has run.
    wait_until_on_page(
        other, lambda: any("run.cancelled" in str(m) for m in held), what="the run's end, held"
    )
    flush_tasks(other)
    expect(error).to_be_visible()  # the run's end has not reached this tab's page yet
    for message in held:  # now it does
        routes[-1].send(message)
    expect(error).to_be_hidden()
    expect(other.get_by_label("Message", exact=True)).to_have_value("what is 12*7")


def test_a_failed_turn_keeps_its_error_and_retry_after_a_reload(
    scripted_server: str, llm_server, page: Page, screenshots_dir: Path
):
    from tests.llm_server import error_reply, text_reply

    llm_server.push(error_reply(400, "This model does not exist."), text_reply("Now it works."))
    log_in(page, scripted_server)
    new_conversation(page)
    ask(page, "hello there")
    failure = page.locator(".notice-error")
    expect(failure).to_contain_text("This model does not exist.")
    page.reload()
    expect(page.locator(".msg-user")).to_contain_text("hello there")
    expect(failure).to_contain_text("This model does not exist.")  # still there
    page.screenshot(path=screenshots_dir / "chat-failed-reload.png")
    failure.get_by_role("button", name="Retry").click()
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("Now it works.")
    # The same question answered again: not posted twice, and the error is gone.
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(failure).to_have_count(0)
    page.reload()
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("Now it works.")
    expect(failure).to_have_count(0)


def test_the_turn_badge_survives_a_reload_and_stays_in_view_at_375_px(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    page.set_viewport_size({"width": 375, "height": 740})
    log_in(page, asgi_server)
    page.get_by_role("button", name="Conversations").click()
    new_conversation(page)
    ask(page, "what is 12*7")
    badge = page.locator(".msg-assistant .meta").last.get_by_text(
        re.compile(r"^turn .+ model call")
    )
    expect(badge).to_be_visible()
    expect(badge).to_be_in_viewport()  # the log scrolled to show the line it added
    page.reload()
    expect(badge).to_be_visible()
    expect(badge).to_be_in_viewport()
    page.screenshot(path=screenshots_dir / "chat-turn-badge-375.png")


# Creating a conversation takes a second: the window in which a message typed
# at once went to the conversation that was open before.
SLOW_CREATE = """
(() => {
  const real = window.fetch;
  window.fetch = (input, init) => {
    const url = typeof input === "string" ? input : input.url;
    const slow = init && init.method === "POST" && /\\/conversations\\/$/.test(url);
    return slow
      ? new Promise((resolve) => setTimeout(resolve, 1000)).then(() => real(input, init))
      : real(input, init);
  };
})();
"""


def test_a_message_typed_while_a_new_conversation_is_created_goes_to_it(
    asgi_server: str, page: Page
):
    from chat.models import Conversation, Message

    page.add_init_script(SLOW_CREATE)
    log_in(page, asgi_server)
    new_conversation(page)
    ask(page, "what is 2+2")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("4")
    page.get_by_role("button", name="New conversation").click()
    ask(page, "what is 12*7")  # while the new conversation is still being created
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    expect(page.locator(".msg-user")).to_have_count(1)
    expect(page.locator("#composer-error")).to_be_hidden()
    first, second = Conversation.objects.order_by("created_at")
    assert list(
        Message.objects.filter(conversation=first, role="user").values_list("content", flat=True)
    ) == ["what is 2+2"]
    assert list(
        Message.objects.filter(conversation=second, role="user").values_list("content", flat=True)
    ) == ["what is 12*7"]


def test_the_sidebars_buttons_wait_for_the_pages_script(asgi_server: str, page: Page):
    """Before the script runs, a click would do nothing: the buttons say so by being disabled."""
    held = []
    page.route(
        re.compile(r".*/static/js/sidebar(\.[0-9a-f]+)?\.js$"), lambda route: held.append(route)
    )
    log_in(page, asgi_server)
    page.set_viewport_size({"width": 375, "height": 740})
    toggle = page.get_by_role("button", name="Conversations")
    new = page.locator("#new-conversation button")  # in the closed sidebar: not shown yet
    expect(toggle).to_be_disabled()
    expect(new).to_be_disabled()
    wait_until_on_page(page, lambda: held, what="the request for the sidebar's module")
    held[0].continue_()
    toggle.click()  # waits for the button to be enabled
    expect(toggle).to_have_attribute("aria-expanded", "true")
    new.click()
    expect(page.locator("#thread-title")).to_have_text("New conversation")


def test_the_system_prompt_is_set_in_the_conversations_settings(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    from django.conf import settings

    from chat.models import Conversation, Run

    log_in(page, asgi_server)
    new_conversation(page)
    page.get_by_text("Settings", exact=True).click()
    prompt = page.get_by_label("System prompt")
    expect(prompt).to_be_visible()
    expect(prompt).to_have_value("")
    expect(prompt).to_have_attribute("placeholder", settings.TOOLCHAT_SYSTEM_PROMPT)
    # A draft keeps it, and is created with it: its first turn is told it.
    prompt.fill("Answer like a pirate.")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#settings-status")).to_contain_text("created with it")
    page.screenshot(path=screenshots_dir / "chat-settings.png")
    prompt.press("Escape")
    expect(prompt).to_be_hidden()
    ask(page, "what is 2+2")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("4")
    conversation = Conversation.objects.get()
    assert conversation.system_prompt == "Answer like a pirate."
    assert Run.objects.get().system_prompt == "Answer like a pirate."

    # An open conversation's prompt is changed with a PATCH; blank is the default again.
    page.get_by_text("Settings", exact=True).click()
    expect(prompt).to_have_value("Answer like a pirate.")
    prompt.fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#settings-status")).to_contain_text("applies from the next message")
    conversation.refresh_from_db()
    assert conversation.system_prompt == ""
    page.reload()
    page.get_by_text("Settings", exact=True).click()
    expect(page.get_by_label("System prompt")).to_have_value("")

    # On a phone the header keeps one row (Settings is its icon) and the panel fits the screen.
    page.set_viewport_size({"width": 375, "height": 740})
    panel = page.locator("#settings-form")
    expect(panel).to_be_visible()
    box = panel.bounding_box()
    assert box is not None
    assert 0 <= box["x"] <= box["x"] + box["width"] <= 375, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=screenshots_dir / "chat-settings-375.png")


def test_a_models_reasoning_is_a_collapsed_block_above_its_answer(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    from chat.models import Role
    from tests.factories import ConversationFactory, MessageFactory

    hostile = '<img src=x onerror="window.__xss=1"> First, 6*7.'
    log_in(page, asgi_server)
    conversation = ConversationFactory(owner=UserFactory(username="ada"), title="Thinking")
    MessageFactory(conversation=conversation, position=0, role=Role.USER, content="6*7?")
    MessageFactory(
        conversation=conversation,
        position=1,
        role=Role.ASSISTANT,
        content="It is **42**.",
        reasoning=hostile,
    )
    MessageFactory(conversation=conversation, position=2, role=Role.USER, content="thanks")
    MessageFactory(
        conversation=conversation, position=3, role=Role.ASSISTANT, content="You're welcome."
    )
    page.goto(f"{asgi_server}/#{conversation.pk}")

    answers = page.locator(".msg-assistant")
    expect(answers).to_have_count(2)
    block = answers.first.locator("details.reasoning")
    expect(block.locator("summary")).to_have_text("Reasoning")
    text = block.locator(".reasoning-text")
    expect(text).to_be_hidden()  # collapsed until asked for
    # Above the answer, in the message's own box.
    assert block.bounding_box()["y"] < answers.first.locator(".bubble").bounding_box()["y"]
    block.locator("summary").click()
    expect(text).to_have_text(hostile)
    page.screenshot(path=screenshots_dir / "chat-reasoning.png")
    expect(answers.last.locator("details.reasoning")).to_have_count(0)
    assert page.locator("#log img").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"


@pytest.mark.parametrize("width", [1280, 375])
def test_times_are_short_local_clock_times_with_the_exact_time_and_zone_on_hover(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    new_conversation(page, "two_pass")
    ask(page, "Note that the boiler was serviced today")
    expect(page.locator(".msg-assistant .bubble").last).to_contain_text("boiler")
    short, exact = r"^\d{2}:\d{2}$", r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} GMT"
    times = [
        page.locator(".msg-user time.msg-time").last,
        page.locator(".msg-assistant time.msg-time").last,
        page.locator(".resource-card time.resource-when").last,
    ]
    for time, says in zip(times, ("Sent ", "Answered ", "Recorded "), strict=True):
        expect(time).to_have_text(re.compile(short))  # "16:04": never "04:04 PM"
        expect(time).to_have_attribute("title", re.compile("^" + says + exact))
        expect(time).to_have_attribute("datetime", re.compile(r"^\d{4}-\d{2}-\d{2}T"))
    sidebar_time = page.locator(".conversation-when").first
    if width > 375:
        expect(sidebar_time).to_have_text("just now")
        expect(sidebar_time).to_have_attribute("title", re.compile("^Last activity: " + exact))
    page.screenshot(path=screenshots_dir / f"chat-times-{width}.png")


_FOCUSED = """() => {
  const el = document.activeElement;
  if (!el) return "";
  if (el.matches('.conversation-link')) return 'link ' + el.querySelector('.conversation-title').textContent;
  return (el.getAttribute('aria-label') || el.id || el.tagName).trim();
}"""


def focused(page: Page) -> str:
    """What has the focus: a conversation link's title, a button's label, or the tag."""
    return page.evaluate(_FOCUSED)


def assert_focus(page: Page, expected: str) -> None:
    """The focus is on `expected` (as `focused` names it), once the page has handled the keys.

    A redraw of the list (its load coming back) restores the focus a moment later.
    """
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_function(f"(want) => ({_FOCUSED})() === want", arg=expected, timeout=3000)
    assert focused(page) == expected


@pytest.mark.parametrize("width", [1280, 375])
def test_the_conversation_list_is_one_tab_stop_walked_with_the_arrow_keys(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    from chat.models import Conversation
    from tests.factories import ConversationFactory

    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    owner = Conversation._meta.get_field("owner").related_model.objects.get(username="ada")
    for title in ("Third", "Second", "First"):  # the newest is listed first
        ConversationFactory(owner=owner, title=title)
    page.reload()
    if width == 375:
        page.get_by_role("button", name="Conversations").click()
    links = page.locator(".conversation-link")
    expect(links).to_have_count(3)
    # The newest opens once the list is drawn, and its Export link then joins the tab
    # order after the list: the walk starts when it is there (a Shift+Tab under load
    # once went back to an Export shown after the Tab had gone past where it now is).
    expect(page.locator("#thread-title")).to_have_text("First")
    expect(page.locator("#export")).to_have_attribute("href", re.compile("/export/$"))
    page.locator("#conversation-search").focus()
    page.keyboard.press("Tab")
    assert_focus(page, "conversations-show-clients")  # the search's box of API clients
    page.keyboard.press("Tab")
    assert_focus(page, "link First")
    page.keyboard.press("Tab")
    assert_focus(page, "Rename “First”")  # the focused one's buttons follow it
    page.keyboard.press("Tab")
    assert_focus(page, "Delete “First”")
    page.keyboard.press("Tab")
    assert not focused(page).startswith(("link", "Rename", "Delete")), focused(page)
    page.keyboard.press("Shift+Tab")
    assert_focus(page, "Delete “First”")
    page.keyboard.press("Shift+Tab")
    assert_focus(page, "Rename “First”")
    page.keyboard.press("Shift+Tab")
    assert_focus(page, "link First")
    page.keyboard.press("ArrowDown")
    assert_focus(page, "link Second")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")  # stays on the last
    assert_focus(page, "link Third")
    page.keyboard.press("ArrowUp")
    assert_focus(page, "link Second")
    # Leaving the list and coming back lands on the one left.
    page.locator("#conversations-show-clients").focus()
    page.keyboard.press("Tab")
    assert_focus(page, "link Second")
    page.keyboard.press("F2")
    expect(page.locator("input.conversation-rename")).to_be_focused()
    page.keyboard.press("Escape")
    page.locator(".conversation-link", has_text="Second").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#thread-title")).to_have_text("Second")
    page.screenshot(path=screenshots_dir / f"chat-sidebar-keyboard-{width}.png")
