"""Budgets on the chat page, in a real browser on a real uvicorn (docs/chat-page.md, "Budgets"):
the Settings panel's Usage section shows the person's own figures and limits, a post over a
hard limit is refused with a notice at the composer that keeps what was typed, and a soft
limit's warning shows in the thread once.

Screenshots: chat-usage-{light,dark}.png, chat-budget-refused-{1280,375}.png,
chat-budget-warning.png.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth import get_user_model

from chat.models import BudgetLimit, Message, ModelCall, RunStatus
from tests.factories import ConversationFactory, ModelCallFactory, RunFactory, UserFactory
from tests.plugins.browser import DEFAULT_TIMEOUT_MS
from tests.test_chat_ui_browser import XSS, ask, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

ANSWER = ".msg-assistant .bubble:visible"
ZONE = "Asia/Tokyo"  # UTC+9 all year: UTC midnight is 09:00 there


@pytest.fixture
def tokyo_page(browser: Browser) -> Iterator[Page]:
    """A page as the `page` fixture's, in a reader's zone that is not UTC."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, locale="en-US", timezone_id=ZONE
    )
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    expect.set_options(timeout=DEFAULT_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def spent(user, prompt: int, completion: int, *, cost: str | None = None, **fields) -> ModelCall:
    """A finished model call of the user's, as a turn leaves one."""
    run = RunFactory(conversation=ConversationFactory(owner=user), status=RunStatus.COMPLETED)
    return ModelCallFactory(
        run=run,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=None if cost is None else Decimal(cost),
        **fields,
    )


def utc(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def open_usage(page: Page):
    page.locator("#conversation-settings > summary").click()
    usage = page.get_by_test_id("usage")
    expect(usage).to_be_visible()
    return usage


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_usage_section_shows_my_own_figures_and_limits(
    asgi_server: str, tokyo_page: Page, screenshots_dir: Path, scheme: str
):
    page = tokyo_page
    page.emulate_media(color_scheme=scheme)
    log_in(page, asgi_server)
    ada = get_user_model().objects.get(username="ada")
    bob = UserFactory(username="bob")
    now = datetime.datetime.now(datetime.UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    tomorrow = day + datetime.timedelta(days=1)
    spent(ada, 15100, 3140, model="gpt-4o-mini", cost="0.0241")
    spent(ada, 1200, 34, model="qwen3", provider="local")  # no price
    spent(
        ada,
        5000,
        0,
        model="qwen3",
        provider="local",
        started_at=month + datetime.timedelta(minutes=1),
    )
    spent(bob, 999_999, 1, model="gpt-4o-mini", cost="9")  # someone else's
    # A run of ada's in flight, which reserved 4,000 tokens and $0.0024 of her day and month.
    RunFactory(
        conversation=ConversationFactory(owner=ada),
        status=RunStatus.AWAITING_APPROVAL,
        budget={"limits": [], "reserved": {"tokens": 4000, "cost_usd": 0.0024}, "warned": []},
    )
    daily = BudgetLimit.objects.create(period="day", tokens=200_000, hard=True, note=XSS)
    daily.users.add(ada)
    monthly = BudgetLimit.objects.create(period="month", cost_usd=Decimal(100), hard=False)
    per_run = BudgetLimit.objects.create(period="run", model_calls=12, tokens=60_000)
    BudgetLimit.objects.create(period="day", tokens=5, note="bob's").users.add(bob)
    conversation = ConversationFactory(owner=ada, title="Budget")
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator("#thread-title")).to_have_text("Budget")

    usage = open_usage(page)
    month_only = 5000 if month < day else 0  # on the 1st, the month's first call is today's
    today = 15100 + 3140 + 1200 + 34 + (5000 - month_only)
    facts = usage.locator(".usage-fact")
    expect(facts).to_have_text(
        [
            f"Tokens{today:,}",
            "Cost$0.0241 (and models with no price)",
            "Reserved by runs in flight4,000 tokens · $0.0024",
        ]
    )
    rows = usage.locator(".usage-models tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("local/qwen3")
    expect(rows.nth(0).locator("td").last).to_have_text("no price")  # never $0
    expect(rows.nth(1)).to_contain_text("openai/gpt-4o-mini")
    expect(rows.nth(1)).to_contain_text("18,240")
    expect(rows.nth(1)).to_contain_text("15,100 in / 3,140 out")
    expect(rows.nth(1).locator("td").last).to_have_text("$0.0241")
    assert "1,000,000" not in usage.inner_text()  # bob's call is not ada's

    # Her three limits, not bob's: used / cap, hard or soft, reset in her zone (UTC on hover).
    limits = usage.locator(".usage-limit")
    expect(limits).to_have_count(3)
    first = usage.locator(f'.usage-limit[data-limit="{daily.pk}"]')
    expect(first.locator(".usage-limit-title")).to_have_text(
        f"Daily limit {daily.pk} · hard: refuses"
    )
    expect(first.locator(".usage-gauge")).to_have_text(
        re.compile(rf"tokens\s*{today + 4000:,} / 200,000")
    )
    reset = first.locator(".usage-limit-reset time")
    expect(reset).to_have_text(re.compile(r"^(today|tomorrow) 09:00$"))
    expect(reset).to_have_attribute("title", utc(tomorrow))
    expect(first.locator(".usage-limit-note")).to_have_text(XSS)  # text, not an image
    soft = usage.locator(f'.usage-limit[data-limit="{monthly.pk}"]')
    expect(soft.locator(".usage-limit-title")).to_contain_text("soft: warns")
    expect(soft.locator(".usage-gauge")).to_have_text(re.compile(r"cost\s*\$0\.0265 / \$100\.00"))
    run = usage.locator(f'.usage-limit[data-limit="{per_run.pk}"]')
    expect(run.locator(".usage-gauge")).to_have_text(
        [re.compile("60,000 tokens a run"), re.compile("12 model calls a run")]
    )
    expect(run.locator(".usage-bar")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=screenshots_dir / f"chat-usage-{scheme}.png")

    # This month: the month's figures, and its reset.
    page.get_by_label("This month").check()
    expect(facts.first).to_have_text(f"Tokens{today + month_only:,}")
    next_month = (month + datetime.timedelta(days=32)).replace(day=1)
    expect(usage.locator(".usage-span time").last).to_have_attribute("title", utc(next_month))

    # An error in loading says so, in words; Refresh reads it again.
    page.context.set_offline(True)
    page.get_by_role("button", name="Refresh").click()
    expect(page.locator("#usage-status")).to_contain_text("Could not load your usage:")
    expect(usage).to_be_hidden()
    page.context.set_offline(False)
    page.get_by_role("button", name="Refresh").click()
    expect(usage).to_be_visible()
    expect(page.locator("#usage-status")).to_be_empty()


@pytest.mark.parametrize("width", [1280, 375])
def test_a_post_over_a_hard_limit_shows_which_and_keeps_the_text(
    asgi_server: str, page: Page, screenshots_dir: Path, width: int
):
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, asgi_server)
    ada = get_user_model().objects.get(username="ada")
    limit = BudgetLimit.objects.create(period="day", tokens=100, hard=True, note=XSS)
    spent(ada, 80, 20)
    conversation = ConversationFactory(owner=ada, title="Budget")
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator("#thread-title")).to_have_text("Budget")

    text = "what is 12*7"
    ask(page, text)
    notice = page.get_by_test_id("budget-notice")
    expect(notice).to_be_visible()
    expect(notice).to_have_attribute("role", "alert")
    expect(notice).to_contain_text("Your daily budget is used up.")
    expect(notice).to_contain_text(
        f"The daily limit is 100 tokens (budget limit {limit.pk}); 100 used."
    )
    tomorrow = datetime.datetime.now(datetime.UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    ) + datetime.timedelta(days=1)
    expect(notice.locator("time")).to_have_attribute("title", utc(tomorrow))
    expect(notice.locator(".budget-notice-note")).to_have_text("Note: " + XSS)
    expect(notice).to_contain_text("Your message was not sent; it is still in the box.")
    # Nothing lost, nothing stored, and not the generic error line.
    expect(page.get_by_label("Message", exact=True)).to_have_value(text)
    expect(page.locator("#composer-error")).to_be_hidden()
    expect(page.locator(".msg-user")).to_have_count(0)
    assert not Message.objects.filter(conversation=conversation).exists()
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=screenshots_dir / f"chat-budget-refused-{width}.png")

    # Dismissed, it goes; with the limit raised, the same text is sent and answered.
    notice.get_by_role("button", name="Dismiss the budget notice").click()
    expect(notice).to_be_hidden()
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    BudgetLimit.objects.filter(pk=limit.pk).update(tokens=1_000_000)
    page.get_by_label("Message", exact=True).press("Enter")
    expect(page.locator(ANSWER).last).to_contain_text("84")
    expect(notice).to_be_hidden()


def test_a_soft_limit_warns_in_the_thread_once(asgi_server: str, page: Page, screenshots_dir: Path):
    log_in(page, asgi_server)
    ada = get_user_model().objects.get(username="ada")
    limit = BudgetLimit.objects.create(period="day", tokens=100, hard=False, note="tell us")
    spent(ada, 80, 20)
    conversation = ConversationFactory(owner=ada, title="Budget")
    page.goto(f"{asgi_server}/#{conversation.pk}")
    expect(page.locator("#thread-title")).to_have_text("Budget")

    ask(page, "what is 12*7")
    expect(page.locator(ANSWER).last).to_contain_text("84")
    banners = page.locator(".notice-warning")
    expect(banners).to_have_count(1)
    banner = banners.first
    expect(banner).to_have_attribute("role", "status")
    expect(banner).to_contain_text(
        f"The daily limit of 100 tokens (budget limit {limit.pk}) is reached"
    )
    expect(banner).to_contain_text("tell us; this is a warning.")
    page.screenshot(path=screenshots_dir / "chat-budget-warning.png")

    # The next post warns again on the server; the page has said it already.
    ask(page, "what is 2*3")
    expect(page.locator(ANSWER).last).to_contain_text("6")
    expect(page.get_by_role("button", name="Regenerate")).to_be_visible()  # the run has ended
    expect(banners).to_have_count(1)
    banner.get_by_role("button", name="Dismiss this warning").click()
    expect(banners).to_have_count(0)
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    ask(page, "what is 3*3")
    expect(page.locator(ANSWER).last).to_contain_text("9")
    expect(page.get_by_role("button", name="Regenerate")).to_be_visible()
    expect(banners).to_have_count(0)


def test_a_regenerate_over_a_hard_limit_shows_the_same_notice(asgi_server: str, page: Page):
    """The REST answer (a regenerate, an edit) is told as the socket's is."""
    log_in(page, asgi_server)
    ask(page, "what is 12*7")
    expect(page.locator(ANSWER).last).to_contain_text("84")
    regenerate = page.get_by_role("button", name="Regenerate")
    expect(regenerate).to_be_visible()
    ada = get_user_model().objects.get(username="ada")
    limit = BudgetLimit.objects.create(period="month", tokens=10, hard=True)
    spent(ada, 10, 0)

    regenerate.click()
    notice = page.get_by_test_id("budget-notice")
    expect(notice).to_contain_text("Your monthly budget is used up.")
    expect(notice).to_contain_text(f"The monthly limit is 10 tokens (budget limit {limit.pk});")
    expect(notice).to_contain_text("Nothing was sent.")
    expect(page.locator("#composer-error")).to_be_hidden()
    expect(page.locator(ANSWER)).to_have_count(1)  # the answer stays
