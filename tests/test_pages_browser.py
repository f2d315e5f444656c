"""The pages in a real browser, served by a real uvicorn with DEBUG off.

Headless Chromium against `asgi_server`: the same ASGI application, static
files (ServeStatic) and settings path as production, on the test PostgreSQL.
The login page's screenshot is written to screenshots/login.png. One test
serves the chat page from files collected with production's storage (hashed
names), whose modules must import each other by their hashed names too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.factories import UserFactory
from tests.plugins.servers import ROOT, AsgiServer, server_environment, server_settle

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


@pytest.fixture
def manifest_server(
    asgi_server_session: AsgiServer, transactional_db: None, tmp_path: Path
) -> Iterator[str]:
    """A uvicorn like the session's, serving static files collected with production's storage."""
    env = {
        **asgi_server_session.env,
        "DJANGO_SETTINGS_MODULE": "tests.manifest_settings",
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=server_environment(**env),
        capture_output=True,
        text=True,
        check=False,
    )
    assert collect.returncode == 0, collect.stderr
    server = AsgiServer(env=env, log_path=tmp_path / "uvicorn-manifest.log")
    server.start()
    try:
        yield server.base_url
        server_settle()
    finally:
        server.stop()


def test_the_chat_page_runs_from_hashed_static_files(manifest_server: str, page: Page):
    modules = sorted(path.name for path in (ROOT / "static" / "js").glob("*.js"))
    requested: list[str] = []
    page.on(
        "request",
        lambda request: requested.append(request.url) if "/static/js/" in request.url else None,
    )
    UserFactory(username="ada")
    log_in(page, manifest_server, "ada", PASSWORD)
    expect(page).to_have_title("New conversation · toolchat")
    box = page.get_by_label("Message", exact=True)
    box.fill("what is 12*7")
    box.press("Enter")
    expect(page.locator(".msg-assistant .bubble:visible").last).to_contain_text("84")
    # Every module came by its hashed name: the page's chat.js, and the imports in each.
    names = sorted({url.rsplit("/", 1)[1] for url in requested})
    assert [re.sub(r"\.[0-9a-f]{12}\.js$", ".js", name) for name in names] == modules
    assert all(re.fullmatch(r"[a-z]+\.[0-9a-f]{12}\.js", name) for name in names), names
