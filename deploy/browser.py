"""Chromium for the dashboard's browser tests: Debian's package, never a downloaded browser.

    python -m deploy.browser [--check]

If /usr/bin/chromium is missing and this is CI (env CI=true) or we are root, it installs Debian's
`chromium` with apt-get (never prompting); elsewhere it says how to. Playwright drives that
binary (`executable_path`), so `playwright install` is never needed and nothing is fetched from
Playwright's servers. With `--check` it then starts it headless through Playwright once.

Exit status 0 when Chromium is there (and starts), 1 when that failed in CI or as root, 0 with a
note otherwise (the browser tests then skip outside CI, and fail in CI).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from deploy.debian_packages import apt_install, in_ci, may_set_up

CHROMIUM = Path("/usr/bin/chromium")
# Headless, and quiet on a machine without outside network: no sandbox (containers, root), no
# GPU, and none of the background calls Chromium makes to Google's services.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def say(message: str) -> None:
    print(f"browser: {message}", file=sys.stderr, flush=True)


def install() -> None:
    """apt-get install chromium (as root, or through passwordless sudo)."""
    apt_install(["chromium"], say)


def ensure() -> bool:
    """Chromium at CHROMIUM: there already, or installed here when we may."""
    if CHROMIUM.exists():
        return True
    if not may_set_up():
        say(f"{CHROMIUM} is missing; install it with `sudo apt-get install chromium`"
            " (the browser tests skip until then)")
        return False
    install()
    return CHROMIUM.exists()


def check() -> None:
    """Start Chromium headless through Playwright and load a page (raises if it cannot)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page()
            page.set_content("<p id='ok'>ok</p>")
            assert page.inner_text("#ok") == "ok"
            say(f"{CHROMIUM} {browser.version} starts headless")
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.browser",
                                description="Find or install Chromium for the browser tests.")
    p.add_argument("--check", action="store_true", help="then start it once through Playwright")
    args = p.parse_args(argv)
    try:
        ok = ensure()
        if ok and args.check:
            check()
    except Exception as err:  # noqa: BLE001 - any failure here is reported the same way
        say(f"cannot set up Chromium: {err}")
        ok = False
    if ok:
        return 0
    return 1 if (in_ci() or os.geteuid() == 0) else 0


if __name__ == "__main__":
    sys.exit(main())
