"""The pages in a real browser, served by a real uvicorn with DEBUG off.

Headless Chromium against `asgi_server`: the same ASGI application, static
files (ServeStatic) and settings path as production, on the test PostgreSQL.
The login page's screenshot is written to screenshots/login.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.factories import UserFactory

if TYPE_CHECKING:
    from playwright.sync_api import Page

# Without playwright the module is skipped (a failure under REQUIRE_SERVICES=1).
expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]

PASSWORD = "correct horse battery staple"  # the factories' password


def log_in(page: Page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_the_login_page_renders(asgi_server: str, page: Page, screenshots_dir: Path):
    response = page.goto(f"{asgi_server}/")
    assert response is not None
    assert response.ok
    assert page.url == f"{asgi_server}/login/?next=/"
    expect(page).to_have_title("Log in · toolchat")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(page.get_by_label("Username")).to_be_visible()
    expect(page.get_by_label("Username")).to_be_focused()
    expect(page.get_by_label("Password")).to_have_attribute("type", "password")
    expect(page.get_by_role("button", name="Log in")).to_be_enabled()
    # The stylesheet loaded: the card is a white, rounded box.
    card = page.locator(".card")
    assert card.evaluate("el => getComputedStyle(el).backgroundColor") == "rgb(255, 255, 255)"
    assert card.evaluate("el => getComputedStyle(el).borderTopLeftRadius") != "0px"
    page.screenshot(path=screenshots_dir / "login.png", full_page=True)


def test_a_wrong_password_shows_the_error(asgi_server: str, page: Page, screenshots_dir: Path):
    UserFactory(username="ada")
    log_in(page, asgi_server, "ada", "not the password")
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    expect(page.get_by_label("Username")).to_have_value("ada")
    expect(page.get_by_label("Password")).to_have_value("")
    assert page.url.startswith(f"{asgi_server}/login/")
    page.screenshot(path=screenshots_dir / "login-error.png", full_page=True)


def test_logging_in_lands_on_the_chat_page_showing_the_provider(
    asgi_server: str, page: Page, screenshots_dir: Path
):
    UserFactory(username="ada")
    log_in(page, asgi_server, "ada", PASSWORD)
    expect(page).to_have_url(f"{asgi_server}/")
    # A new user lands in a new conversation, ready to type (created by the first message).
    expect(page).to_have_title("New conversation · toolchat")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    expect(page.get_by_test_id("provider")).to_have_text("offline")
    expect(page.get_by_role("navigation", name="Account")).to_contain_text("ada")
    page.screenshot(path=screenshots_dir / "chat.png", full_page=True)

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{asgi_server}/login/")


def test_the_admin_login_page_has_its_css(asgi_server: str, page: Page):
    css = page.request.get(f"{asgi_server}/static/admin/css/base.css")
    assert css.status == 200
    assert css.headers["content-type"].startswith("text/css")

    page.goto(f"{asgi_server}/admin/")
    expect(page).to_have_url(f"{asgi_server}/admin/login/?next=/admin/")
    expect(page.locator("#site-name")).to_contain_text("toolchat administration")
    # admin/css/base.css colours the header; unstyled, it would be transparent.
    header = page.locator("#header")
    background = header.evaluate("el => getComputedStyle(el).backgroundColor")
    assert background not in {"rgba(0, 0, 0, 0)", "transparent"}
    assert page.locator("#id_username").is_visible()
