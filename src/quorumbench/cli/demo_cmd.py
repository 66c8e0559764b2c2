"""``quorumbench demo``: the whole protocol on one machine, with real models.

1. Start the server in this process (SQLite in the data directory, the quick-start
   benchmarks, a quorum of three).
2. Prepare two real models: the bundled SmolLM2-135M-Instruct and a LoRA tweak of it
   made on the spot with peft on its transformers conversion (converted from GGUF
   once, cached; a fixed seed, so the same adapter every time). The adapter names the
   bundled GGUF file as its base, so runners run both models on llama.cpp.
3. Create an admin account that owns the models and three volunteer accounts, and
   register both models through the HTTP API as the admin.
4. Start three ``quorumbench runner start`` processes, one per volunteer account;
   they pull, evaluate and submit over HTTP like any volunteer's runner.
5. Once every task of the epoch is final, stop the runners (Ctrl-C semantics: any
   lease is released), print the leaderboard, an example ask's URL, a funded prize
   pool over both models (``cli/_demo_pool.py``) and the server's URL, and keep
   serving until Ctrl-C (or exit at once with ``--no-serve``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import SecretStr
from rich.console import Console

from quorumbench.cli._console import escape, make_console
from quorumbench.cli._demo_pool import print_demo_pool
from quorumbench.cli._demo_wait import RunnerProcess, demo_tasks, wait_for_consensus
from quorumbench.cli._options import DatasetsDir
from quorumbench.errors import ConfigError, ConflictError, QuorumError
from quorumbench.runner.client import ServerClient
from quorumbench.runner.keys import create_key

ADMIN = "demo-admin"
VOLUNTEERS = ("alice", "bob", "carol")
BUNDLED_REF = "bundled:smollm2-135m-instruct"
ADAPTER_SEED = 20261122
ADAPTER_NAME = "smollm2-135m-instruct-lora-demo"
BASE_NAME = "SmolLM2-135M-Instruct"
DEMO_BENCHMARKS = ("arith", "gen-reasoning", "humaneval", "gen-language", "gen-safety")
"""One offline benchmark per pillar (math, reasoning, coding, language, safety): a
five-pillar board with nothing to download."""


@dataclass
class DemoOptions:
    data_dir: Path | None = None
    serve: bool = True
    host: str = "127.0.0.1"
    port: int = 8000
    samples: int = 5
    benchmarks: list[str] = field(default_factory=lambda: list(DEMO_BENCHMARKS))
    datasets_dir: Path | None = None
    cache_dir: Path | None = None
    timeout_s: float = 1200.0


def run_demo(options: DemoOptions, console: Console) -> None:
    """Run the demo; see the module docstring."""
    from quorumbench.api.app import create_app
    from quorumbench.services.scheduler import epoch_start
    from quorumbench.settings import QueueSettings, ServerSettings, is_loopback

    with ExitStack() as stack:
        data_dir = options.data_dir
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="quorumbench-demo-"))
            stack.callback(shutil.rmtree, data_dir, True)
        data_dir.mkdir(parents=True, exist_ok=True)
        settings = ServerSettings(
            data_dir=data_dir,
            # the embedded defaults whatever QB_DATABASE_URL / QB_QUEUE__* say
            database_url=None,
            queue=QueueSettings(),
            benchmarks=options.benchmarks,
            quorum=3,
            samples_per_task=options.samples,
            depth_tiers=[],  # one epoch of two models: every task as deep as --samples
            scheduler_interval_s=1.0,
            # Short leases: a runner killed in an earlier run of the demo on the same
            # data directory holds its slots for a minute, not the default ten.
            lease_seconds=60,
            registrations_per_week=max(10, len(VOLUNTEERS)),
            quota_evaluations=0,
            # A short edge workload, so the demo's model pages show edge figures after
            # a few seconds of each runner's time (the server's default is 512 + 128).
            edge_prompt_tokens=64,
            edge_gen_tokens=16,
            edge_min_runs=2,
            edge_min_time_s=0.0,
            # Signing in on the site without an OAuth app: only where nobody else can
            # reach the server (the settings refuse it on any other interface).
            insecure_dev_login=is_loopback(options.host),
        )
        console.rule("QuorumBench demo")
        console.print(f"data directory: {escape(data_dir)}", highlight=False)

        base_dir, base_sha = _prepare_base_model(options, console)
        adapter_dir = _make_adapter(
            base_dir, f"{BUNDLED_REF}@{base_sha}", data_dir / "models" / ADAPTER_NAME, console
        )

        app = create_app(settings, datasets_dir=options.datasets_dir)
        server = _start_server(app, options, console)
        stack.callback(server.stop)
        ctx = server.context
        console.print(
            escape(
                f"server on {server.url} (SQLite {settings.sqlalchemy_url.rsplit('/', 1)[-1]}, "
                f"benchmarks {', '.join(settings.benchmarks)}, quorum {settings.quorum})"
            ),
            highlight=False,
        )

        admin_token, tokens = _accounts(ctx)
        with httpx.Client(base_url=server.url, timeout=600) as api:
            models = [
                _register(api, admin_token, BUNDLED_REF, BASE_NAME, console),
                _register(
                    api,
                    admin_token,
                    f"hf:{adapter_dir}",
                    "SmolLM2-135M-Instruct + demo LoRA",
                    console,
                ),
            ]
            pending = _open_tasks(api, [m["id"] for m in models])
            if pending:
                logs = data_dir / "logs"
                logs.mkdir(exist_ok=True)
                started = time.monotonic()
                # Hold the tasks' epoch while the runners work: an hour that turns
                # meanwhile schedules nothing that the demo's own tasks (its edge
                # tasks are leased last) would wait behind.
                ctx.scheduling_at = epoch_start(ctx, max(t["epoch"] for t in pending))
                try:
                    with _runners(server.url, tokens, options, logs, console) as runners:
                        wait_for_consensus(
                            api, [m["id"] for m in models], runners, options.timeout_s, console
                        )
                finally:
                    ctx.scheduling_at = None
            else:
                started = None
                console.print("every task of this epoch is final already")
            _print_results(api, options, console)
            if started is not None:
                took = time.monotonic() - started
                console.print(f"from the runners' start to this board: {took:.0f} s")
            _print_ask(api, server.url, console)
            print_demo_pool(
                api,
                server.url,
                admin_token,
                ADMIN,
                list(options.benchmarks),
                [m["id"] for m in models],
                console,
            )
        console.print(
            escape(f"\nleaderboard: {server.url}/  (API {server.url}/v0, docs {server.url}/docs)")
        )
        _print_signin(server.url, settings.insecure_dev_login, console)
        if options.data_dir is not None:
            console.print(
                escape(
                    f"the database stays in {data_dir}; serve it again with its benchmarks: "
                    f"`QB_BENCHMARKS='{json.dumps(settings.benchmarks)}' quorumbench serve "
                    f"--data-dir {data_dir}` (with the development sign-in: "
                    "`QB_INSECURE_DEV_LOGIN=1 QB_BENCHMARKS=… quorumbench serve …` on 127.0.0.1)"
                ),
                highlight=False,
            )
        if options.serve:
            console.print("serving until Ctrl-C …")
            _serve_until_interrupted(server.thread)


def _print_signin(url: str, dev_login: bool, console: Console) -> None:
    """How to sign in on the running server, and what a signed-in person can do there."""
    if dev_login:
        console.print(
            escape(
                f"sign in: {url}/signin with the development sign-in (on because the demo "
                f"listens on loopback only): as {ADMIN} (owner of both models) or any new "
                f"name; then {url}/submit registers a model and {url}/account shows your "
                "quota, models, runners and API tokens"
            ),
            highlight=False,
        )
    else:
        console.print(
            escape(
                f"sign in: {url}/signin needs an OAuth app (QB_OAUTH_PROVIDERS, "
                "docs/server.md): the development sign-in is only offered on a loopback address"
            ),
            highlight=False,
        )


def _prepare_base_model(options: DemoOptions, console: Console) -> tuple[Path, str]:
    """The bundled model as a transformers directory (converted once, then cached), and
    the SHA-256 of its GGUF file."""
    from quorumbench.backends._files import file_sha256
    from quorumbench.backends._registry import resolve_bundled
    from quorumbench.backends.gguf import converted_dir
    from quorumbench.evaluation.refs import parse_ref

    gguf = Path(resolve_bundled(parse_ref(BUNDLED_REF)).location)
    with (
        _quiet_transformers(),
        console.status("preparing the bundled SmolLM2-135M-Instruct (first run: ~20 s) …"),
    ):
        digest = file_sha256(gguf)
        directory = converted_dir(gguf, digest, options.cache_dir)
    console.print(f"bundled model ready ({escape(directory)})", highlight=False)
    return directory, digest


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No tqdm bars or deprecation chatter from transformers over our own output."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)


def _make_adapter(base_dir: Path, base_ref: str, out: Path, console: Console) -> Path:
    """A small LoRA adapter made on ``base_dir`` (the same bytes for the same seed),
    naming ``base_ref`` (the GGUF file ``base_dir`` was converted from) as its base."""
    if (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file():
        return out
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with _quiet_transformers(), console.status("making a LoRA tweak of SmolLM2 with peft …"):
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        torch.manual_seed(ADAPTER_SEED)
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        )
        model = get_peft_model(base, config)
        with torch.no_grad():  # a gentle tweak: the model still answers, a little differently
            for name, parameter in model.named_parameters():
                if "lora_B" in name:
                    parameter.mul_(0.5)
        staging = Path(tempfile.mkdtemp(prefix="adapter-", dir=out.parent.parent))
        try:
            model.save_pretrained(staging)
            config_path = staging / "adapter_config.json"
            saved = json.loads(config_path.read_text(encoding="utf-8"))
            saved["base_model_name_or_path"] = base_ref
            config_path.write_text(json.dumps(saved, indent=2), encoding="utf-8")
            out.parent.mkdir(parents=True, exist_ok=True)
            if out.exists():
                shutil.rmtree(out)
            staging.rename(out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    console.print(f"LoRA adapter ready ({escape(out)})", highlight=False)
    return out


def _start_server(app: Any, options: DemoOptions, console: Console) -> Any:
    from quorumbench.api.embedded import EmbeddedServer

    try:
        server = EmbeddedServer(app, options.host, options.port)
    except ConfigError:
        if options.port == 0:
            raise
        server = EmbeddedServer(app, options.host, 0)
        console.print(f"port {options.port} is taken; using a free one", highlight=False)
    with console.status("starting the server (migrating the database) …"):
        server.start()
    return server


def _accounts(ctx: Any) -> tuple[str, dict[str, str]]:
    """Admin and volunteer accounts (reused when the data directory has them)."""
    from quorumbench.services.accounts import create_account, issue_token

    for name, admin in ((ADMIN, True), *((v, False) for v in VOLUNTEERS)):
        with suppress(ConflictError):  # a kept data directory has the account already
            create_account(ctx, name, is_admin=admin)
    admin_token = issue_token(ctx, ADMIN, scopes=("admin", "model:register"), name="demo").token
    tokens = {
        name: issue_token(ctx, name, scopes=("task:pull", "task:submit"), name="demo").token
        for name in VOLUNTEERS
    }
    return admin_token, tokens


def _register(api: httpx.Client, token: str, ref: str, name: str, console: Console) -> Any:
    """Register ``ref`` over the API; the existing entry when it is registered already."""
    response = api.post(
        "/v0/models", json={"ref": ref, "name": name}, headers={"Authorization": f"Bearer {token}"}
    )
    body = response.json()
    if response.status_code == 409 and "existing_model_id" in body:
        console.print(escape(f"{name}: registered already (model {body['existing_model_id']})"))
        return api.get(f"/v0/models/{body['existing_model_id']}").raise_for_status().json()
    if response.status_code == 200:  # the admin's own registration, from a kept data directory
        console.print(escape(f"{name}: registered already (model {body['id']})"))
        return body
    if response.status_code != 201:
        raise QuorumError(
            f"registering {ref} failed: HTTP {response.status_code}: {body.get('detail', body)}"
        )
    params = body.get("params")
    size = "size unknown" if params is None else f"{params:,} parameters"
    if body.get("base_ref"):
        size = f"LoRA adapter, {size}, on {body['base_ref'].split('@')[0]}"
    console.print(
        escape(f"registered model {body['id']}: {name} ({size})\n  ref {body['ref']}"),
        highlight=False,
    )
    return body


def _open_tasks(api: httpx.Client, model_ids: list[int]) -> list[dict[str, Any]]:
    return [t for t in demo_tasks(api, model_ids) if not t["final"]]


@contextmanager
def _runners(
    url: str, tokens: dict[str, str], options: DemoOptions, logs: Path, console: Console
) -> Iterator[list[RunnerProcess]]:
    """One ``quorumbench runner start`` process per volunteer; stopped with SIGINT."""
    threads = max(1, (os.cpu_count() or 1) // len(tokens))
    started: list[RunnerProcess] = []
    sandbox = _sandbox_flags(console)
    try:
        for account, token in tokens.items():
            # What `quorumbench runner init` does: a signing key, registered.
            key = create_key(logs / "keys" / f"{account}.key")
            with ServerClient(url, SecretStr(token), f"{account}-demo") as client:
                client.register_key(key)
            env = dict(os.environ)
            env.update(
                QB_RUNNER_TOKEN=token,  # through the environment: never on a command line
                OMP_NUM_THREADS=env.get("OMP_NUM_THREADS") or str(threads),  # empty: unset
                TOKENIZERS_PARALLELISM="false",
                COLUMNS="100",
            )
            command = [
                sys.executable,
                "-m",
                "quorumbench.cli.app",
                "runner",
                "start",
                "--server",
                url,
                "--name",
                f"{account}-demo",
                "--key-file",
                str(key.path),
                "--device",
                "cpu",
            ]
            if options.cache_dir:
                command += ["--cache-dir", str(options.cache_dir)]
            if options.datasets_dir:
                command += ["--datasets-dir", str(options.datasets_dir)]
            command += sandbox
            log_path = logs / f"runner-{account}.log"
            log = log_path.open("ab")
            process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            started.append(RunnerProcess(account, process, log_path, log))
        console.print(
            escape(
                f"started {len(started)} runner processes ({', '.join(tokens)}); their logs: {logs}"
            ),
            highlight=False,
        )
        yield started
    finally:
        for runner in started:
            if runner.process.poll() is None:
                runner.process.send_signal(signal.SIGINT)
        for runner in started:
            try:
                runner.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                runner.process.kill()
                runner.process.wait()
            runner.log.close()


def _sandbox_flags(console: Console) -> list[str]:
    """The runners evaluate in a sandbox when this machine can make one; otherwise
    (the demo's two models are its own) in process, and the demo says so."""
    from quorumbench.runner.sandbox import Limits, default_memory_mb, resolve_sandbox

    try:
        sandbox = resolve_sandbox("auto", Limits(default_memory_mb(), 512))
    except ConfigError as exc:
        console.print(
            f"[yellow]{escape(exc.message.split('. ')[0])}: the demo's runners evaluate its own "
            "two models without one (--no-sandbox)[/]",
            highlight=False,
        )
        return ["--no-sandbox"]
    assert sandbox is not None
    console.print(
        f"the runners evaluate model code in a {escape(sandbox.tool)} sandbox", highlight=False
    )
    return ["--sandbox", sandbox.tool]


def _print_results(api: httpx.Client, options: DemoOptions, console: Console) -> None:
    from quorumbench.cli.server_cmd import print_leaderboard

    for benchmark in options.benchmarks:
        rows = api.get("/v0/leaderboard", params={"benchmark": benchmark}).json()["rows"]
        print_leaderboard(console, rows, benchmark)
    if len(options.benchmarks) > 1:
        rows = api.get("/v0/leaderboard", params={"unranked": "true"}).json()["rows"]
        print_leaderboard(console, rows, "aggregate")


DEMO_QUERY = "which model is best at math and logic puzzles?"
"""The demo's example question: its plan covers arith's and gen-reasoning's samples."""


def _print_ask(api: httpx.Client, url: str, console: Console) -> None:
    """Ask the demo's example question and print its shareable board (answered from the
    verified results the demo just made)."""
    made = api.post("/v0/asks", json={"query": DEMO_QUERY})
    if made.status_code != 201:
        console.print(escape(f"ask: the example question was refused: {made.text}"))
        return
    ask = made.json()
    rows = api.get(f"/v0/asks/{ask['id']}/board").json()["rows"]
    console.print(
        escape(
            f"\nask {DEMO_QUERY!r}: {len(rows)} model(s) answered from verified results: "
            f"{url}/ask?plan={ask['plan_id']}"
        ),
        highlight=False,
    )


def _serve_until_interrupted(thread: threading.Thread) -> None:
    try:
        while thread.is_alive():
            thread.join(timeout=0.5)
    except KeyboardInterrupt:
        return


def demo_command(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            file_okay=False,
            help="Keep the database here (serve it later with `quorumbench serve --data-dir "
            "DIR`); default: a temporary directory removed on exit.",
        ),
    ] = None,
    no_serve: Annotated[
        bool, typer.Option("--no-serve", help="Exit after printing the leaderboard.")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option("--port", min=0, max=65535, help="TCP port (a free one if it is taken)."),
    ] = 8000,
    samples: Annotated[
        int, typer.Option("--samples", min=1, max=200, help="Samples per task.")
    ] = 5,
    benchmark: Annotated[
        list[str] | None,
        typer.Option(
            "--benchmark",
            "-b",
            help="Benchmarks to schedule (repeat; default: one offline benchmark per "
            "pillar: " + ", ".join(DEMO_BENCHMARKS) + ").",
        ),
    ] = None,
    datasets_dir: DatasetsDir = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            file_okay=False,
            help="Cache of converted models (else QB_CACHE_DIR, else ~/.cache/quorumbench).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Give up waiting for consensus after (s).")
    ] = 1200,
) -> None:
    """Start a server, register two real models, run three runners to consensus."""
    from quorumbench.settings import get_settings

    defaults = get_settings()
    datasets = datasets_dir or defaults.datasets_dir
    options = DemoOptions(
        data_dir=data_dir,
        serve=not no_serve,
        host=host,
        port=port,
        samples=samples,
        benchmarks=benchmark or list(DEMO_BENCHMARKS),
        datasets_dir=datasets,
        cache_dir=cache_dir or defaults.cache_dir,
        timeout_s=timeout,
    )
    run_demo(options, make_console())
