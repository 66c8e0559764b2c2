"""``quorumbench serve`` and the admin commands as an operator runs them: subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ..ports import free_port


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "quorumbench.cli.app", *args]


def quick_env() -> dict[str, str]:
    """This process's environment, with the server's benchmarks cut to ``arith`` (the
    default list reads GSM8K and TruthfulQA from the Hub or a datasets directory)."""
    return {"QB_BENCHMARKS": '["arith"]', **os.environ}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), capture_output=True, text=True, env=env or quick_env(), timeout=300
    )


class Served:
    """One ``quorumbench serve`` process; its log (stderr) goes to a file."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = tmp / f"serve-{self.port}.log"
        self.out_file = tmp / f"serve-{self.port}.out"
        self.env = {**quick_env(), **(env or {})}
        self.args = ["serve", "--port", str(self.port), *args]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Served:
        with self.log_file.open("wb") as err, self.out_file.open("wb") as out:
            self.proc = subprocess.Popen(cli(*self.args), stdout=out, stderr=err, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/v0/health", timeout=2).status_code in (200, 503):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve did not answer within 60 s:\n{self.output()}")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __exit__(self, *_: object) -> None:
        self.stop()

    def output(self) -> str:
        return self.out_file.read_text() + self.log_file.read_text()

    def log(self) -> str:
        return self.log_file.read_text()
