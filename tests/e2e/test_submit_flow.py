"""Earning a submit, registering the demo LoRA from ``/submit`` and retiring it, end to
end: headless Chromium (Playwright) against a live server with the development
sign-in on.

Dana signs in and owes 3 evaluations; her runner and two others (real runner clients,
``ServerClient``: signed submissions over HTTP, the evaluation replaced by agreeing
scores as in ``tests/integration/adversarial``) finish three tasks of bob's models, so
she owes none. The demo's LoRA adapter (made with peft on the bundled SmolLM2, as
``quorumbench demo`` makes it) is published with its base on a local Hub, read
through the real Hub client; Dana checks it on ``/submit`` by keyboard, confirms,
sees it on ``/account``; runners score it and it joins the board; she makes and
revokes a token, retires the model, and it leaves the board. axe-core finds nothing
on the form, its report and the retire page in light and dark. Screenshots go to
``$QB_SCREENSHOTS``, else ``tests/artifacts/web/`` (``submit*.png``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr
from rich.console import Console

from integration.adversarial.test_adversaries import honest_scores, payload
from integration.server.conftest import fake_metadata, hub_ref
from integration.server.test_header_only_metadata import BASE_SHA, SHA, LocalHub, _Handler
from integration.web.browser import serve_site
from quorumbench.api.embedded import EmbeddedServer
from quorumbench.cli.demo_cmd import ADAPTER_NAME, _make_adapter
from quorumbench.runner.client import ServerClient
from quorumbench.runner.keys import create_key
from quorumbench.services.accounts import Principal, create_account, get_account, issue_token
from quorumbench.services.model_metadata import HfHubClient, inspect_model
from quorumbench.services.models import register_model, retire_model
from quorumbench.services.scheduler import ensure_epoch, schedule_epoch

from .test_web import ARTIFACTS, AxeFindings, browser

__all__ = ["browser"]  # the module's Chromium, shared with test_web
BASE_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
LORA_REPO = f"quorumbench/{ADAPTER_NAME}"
LORA_NAME = "SmolLM2-135M-Instruct + demo LoRA"
CARD = "---\nlicense: apache-2.0\n---\n# {}\n"


def shot(page, name: str) -> Path:
    where = Path(os.environ.get("QB_SCREENSHOTS") or ARTIFACTS)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture(scope="module")
def hub(tmp_path_factory, smollm2_dir):
    """A local Hub with the demo's LoRA adapter and its base, SmolLM2-135M-Instruct."""
    made = tmp_path_factory.mktemp("hub")
    adapter = _make_adapter(
        smollm2_dir, BASE_REPO, made / "models" / ADAPTER_NAME, Console(quiet=True)
    )
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    config.update(base_model_name_or_path=BASE_REPO, revision=BASE_SHA)  # pinned on the Hub
    published = made / "lora"
    published.mkdir()
    (published / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(adapter / "adapter_model.safetensors", published)
    (published / "README.md").write_text(CARD.format(LORA_NAME), encoding="utf-8")
    base = made / "base"
    base.mkdir()
    (base / "README.md").write_text(CARD.format(BASE_REPO), encoding="utf-8")
    local = LocalHub()
    local.add(LORA_REPO, SHA, {p.name: p for p in published.iterdir()})
    files = {p.name: p for p in (smollm2_dir / "config.json", smollm2_dir / "model.safetensors")}
    local.add(BASE_REPO, BASE_SHA, {**files, "README.md": base / "README.md"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"hub": local}))
    server.daemon_threads = True
    local.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield local
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def site(tmp_path_factory, hub):
    """Bob's three models, open for evaluation; Dana, who owes 3 evaluations."""
    settings = {"quota_evaluations": 3, "samples_per_task": 4, "depth_tiers": [], "web_cache_s": 0}
    with serve_site(tmp_path_factory.mktemp("submit"), **settings) as made:
        ctx = made.ctx
        ctx.clock = lambda: datetime.now(UTC)  # runners sign with the real time

        def inspect(ref: str):
            if ref.startswith("hf:org/"):  # bob's models: fake metadata
                return fake_metadata(ref)
            with HfHubClient(hub.url, token="hf_test") as client:
                return inspect_model(ref, hub=client)

        ctx.inspector = inspect
        bob = create_account(ctx, "bob")
        as_bob = Principal(bob.id, "bob", True, frozenset({"admin"}))
        for n in range(3):
            register_model(ctx, as_bob, hub_ref(n + 1), name=f"bob-model-{n + 1}")
        schedule_epoch(ctx, ensure_epoch(ctx, ctx.now()))
        for name in ("dana", "erin", "frank"):
            create_account(ctx, name)
        yield made


@pytest.fixture(scope="module")
def server(site):
    with EmbeddedServer(site.app) as running:
        yield running.url


def run_runners(server: str, site, accounts: list[str], tmp: Path) -> int:
    """Real runner clients of ``accounts`` pull and submit agreeing results until no
    task is left for them; how many results they submitted."""
    clients = []
    for account in accounts:
        token = issue_token(site.ctx, account, scopes=("task:pull", "task:submit")).token
        client = ServerClient(
            server,
            SecretStr(token),
            f"{account}-box",
            max_attempts=2,
            key=create_key(tmp / f"{account}.key"),
        )
        assert client.key is not None
        client.register_key(client.key)
        clients.append(client)
    submitted = 0
    try:
        for _ in range(20):
            worked = False
            for client in clients:
                lease = client.pull()
                if lease is None:
                    continue
                worked = True
                scores = honest_scores(lease.task.model.id, len(lease.task.sample_ids))
                client.submit(lease, payload(lease, scores))
                submitted += 1
            if not worked:
                break
    finally:
        for client in clients:
            client.close()
    return submitted


def erin_admin(site) -> Principal:
    erin = get_account(site.ctx, "erin")
    return Principal(erin.id, "erin", True, frozenset({"admin"}))


def new_context(browser, **options):
    options.setdefault("viewport", {"width": 1280, "height": 900})
    context = browser.new_context(**options)
    context.set_default_timeout(10000)
    return context


def sign_in(page, server: str, account: str) -> None:
    page.goto(server + "/signin")
    page.get_by_label("Account name").fill(account)
    page.get_by_role("button", name="Sign in (development)").click()
    page.wait_for_url(re.compile(r"/account$"))


def board_names(page, server: str) -> list[str]:
    page.goto(server + "/")
    return page.locator("#board tbody td.name > a").all_inner_texts()


def test_earn_register_the_demo_lora_from_the_form_and_retire_it(browser, server, site, tmp_path):
    context = new_context(browser, color_scheme="light")
    try:
        page = context.new_page()
        sign_in(page, server, "dana")
        assert page.locator("#quota-owed").inner_text() == "3"

        page.goto(server + "/submit")
        page.get_by_label("Model ref").fill(f"hf:{LORA_REPO}@main")
        page.get_by_role("button", name="Check").click()
        page.wait_for_url(re.compile(r"/submit/preview$"))
        errors = page.locator("li.finding-error")
        assert errors.count() == 1 and "earn your submit" in errors.inner_text().lower()
        assert page.locator("#register-form").count() == 0

        # three evaluations of bob's models: Dana's runner with two others
        assert run_runners(server, site, ["dana", "erin", "frank"], tmp_path) == 9
        page.goto(server + "/account")
        assert page.locator("#quota-owed").inner_text() == "0"
        assert page.locator("#quota-can-register").inner_text() == "yes"

        # the form by keyboard: type the ref, Tab to the name, Enter submits
        page.goto(server + "/submit")
        page.get_by_label("Model ref").focus()
        page.keyboard.type(f"hf:{LORA_REPO}@main")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "submit-name"
        page.keyboard.type(LORA_NAME)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/submit/preview$"))
        assert "Ready to register" in page.locator("#report-heading").inner_text()
        detected = page.locator("#detected").inner_text()
        assert f"hf:{LORA_REPO}@{SHA}" in detected and "adapter" in detected
        assert f"hf:{BASE_REPO}@{BASE_SHA}" in detected and "apache-2.0" in detected
        assert page.locator("#report-owed").inner_text() == "0"
        assert "estimate" in page.locator("#estimate").inner_text()
        assert page.get_by_label("Name").input_value() == LORA_NAME  # kept
        shot(page, "submit-preview")
        phone = new_context(browser, viewport={"width": 390, "height": 844}, is_mobile=True)
        try:  # the same report on a phone: no sideways scroll
            small = phone.new_page()
            sign_in(small, server, "dana")
            small.goto(server + "/submit")
            small.get_by_label("Model ref").fill(f"hf:{LORA_REPO}@main")
            small.get_by_role("button", name="Check").click()
            small.wait_for_url(re.compile(r"/submit/preview$"))
            assert small.evaluate("document.documentElement.scrollWidth") <= 390
            shot(small, "submit-preview-phone")
        finally:
            phone.close()

        confirm = page.get_by_role("button", name=f"Register {LORA_NAME}")
        confirm.focus()
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/account\?registered=\d+#models$"))
        model_id = int(re.search(r"registered=(\d+)", page.url)[1])
        assert "is registered" in page.locator("#model-notice").inner_text()
        row = page.locator("#own-models tbody tr", has_text=LORA_NAME)
        assert "pending" in row.inner_text()
        shot(page, "submit-account")

        # runners of other accounts score it; it joins the board
        assert run_runners(server, site, ["bob", "erin", "frank"], tmp_path) == 3
        assert LORA_NAME in board_names(page, server)

        # a token made and revoked on /account
        page.goto(server + "/account")
        page.get_by_label("Name", exact=True).fill("dana runner")
        page.get_by_role("button", name="Create token").click()
        page.wait_for_url(re.compile(r"/account/tokens/created\?form="))
        token = page.get_by_label(re.compile("^Token")).input_value()
        page.goto(server + "/account")
        page.locator("#own-tokens tbody tr", has_text="dana runner").get_by_role(
            "button", name=re.compile("^Revoke")
        ).click()
        page.wait_for_url(re.compile(r"/account\?revoked=\d+"))
        me = page.request.get(server + "/v0/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status == 401

        # retire it: a confirmation first, then it leaves the board
        row = page.locator("#own-models tbody tr", has_text=LORA_NAME)
        assert "ranked" in row.inner_text()
        row.get_by_role("link", name=re.compile("^Retire")).click()
        page.wait_for_url(re.compile(rf"/account/models/{model_id}/retire$"))
        assert "results and log entries stay" in page.locator("main").inner_text()
        page.get_by_role("button", name=f"Retire {LORA_NAME}").click()
        page.wait_for_url(re.compile(rf"/account\?retired={model_id}#models$"))
        assert "is retired" in page.locator("#model-notice").inner_text()
        row = page.locator("#own-models tbody tr", has_text=LORA_NAME)
        assert "retired" in row.inner_text()
        assert row.get_by_role("link", name=re.compile("^Retire")).count() == 0
        shot(page, "submit-account-retired")
        names = board_names(page, server)
        assert LORA_NAME not in names and "bob-model-1" in names
        assert page.request.get(f"{server}/models/{model_id}").ok  # its page stays
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_submit_pages_pass_the_axe_checks(browser, server, site, scheme):
    axe = AxeFindings()
    context = new_context(browser, color_scheme=scheme)
    try:
        page = context.new_page()

        def check(label: str) -> None:
            axe.check(page, label)

        page.goto(server + "/submit")
        check("/submit signed out")
        sign_in(page, server, "erin")
        page.goto(server + "/submit")
        check("/submit")
        page.get_by_label("Model ref").fill(f"hf:{LORA_REPO}@main")
        page.get_by_role("button", name="Check").click()
        page.wait_for_url(re.compile(r"/submit/preview$"))
        check("/submit report")
        shot(page, f"submit-preview-{scheme}")
        page.get_by_label("Model ref").fill("hf:nobody/nothing@main")
        page.get_by_role("button", name="Check").click()
        page.wait_for_url(re.compile(r"/submit/preview$"))
        check("/submit refused")
        page.goto(server + "/account")
        check("/account")
        shot(page, f"submit-account-{scheme}")
        owned = register_model(site.ctx, erin_admin(site), hub_ref(60 + len(scheme)), name="e")
        try:
            page.goto(f"{server}/account/models/{owned.id}/retire")
            check("retire confirmation")
        finally:
            # the module's other test counts the results its runners submit: a model
            # left here would be scheduled with the next registration and add its own
            retire_model(site.ctx, erin_admin(site), owned.id)
    finally:
        context.close()
    assert not axe.found, axe.found
