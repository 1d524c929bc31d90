"""The headers a bench's API calls carry: a token for admin on the cluster the bench started, or
the CLI's token (`epochal user login`, EPOCHAL_TOKEN) for a master given on the command line."""

from __future__ import annotations

import httpx

from cli import credentials


def admin_headers(api_url: str, admin_password: str) -> dict[str, str]:
    answer = httpx.post(f"{api_url}/api/v1/auth/login", timeout=60,
                        json={"username": "admin", "password": admin_password})
    answer.raise_for_status()
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def cli_headers(api_url: str) -> dict[str, str]:
    token = credentials.token_for(api_url)
    if not token:
        raise SystemExit(f"not logged in to {api_url}: run `epochal -m {api_url} user login`")
    return {"Authorization": f"Bearer {token}"}
