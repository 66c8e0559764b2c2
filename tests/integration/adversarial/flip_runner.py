"""A runner process that flips ``k`` of each task's answers on purpose.

It is the chaos runner (tests/integration/chaos/chaos_runner.py: the real ``Runner``
loop and ``ServerClient``, a scripted model that knows the gold answers) with one
change: for the first ``k`` samples of a task, in sampling order, it gives the other
answer than an honest runner would (the gold answer where the honest model is wrong,
a wrong one where it is right). ``k`` depends on the task's model:

    python flip_runner.py --flips '{"1": 2, "2": 3}' <chaos_runner.py arguments>

(model number -> k; models not named are answered honestly). Everything else, the
arguments, the journal, the way it stops, is chaos_runner.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))

import chaos_runner
from chaos_runner import WRONG_ANSWER, OracleEvaluator, model_number

from quorumbench.backends import BackendOptions
from quorumbench.backends.mock import MockBackend
from quorumbench.benchmarks.arith import generate_item
from quorumbench.evaluation.backend import ModelBackend
from quorumbench.evaluation.results import RunResult
from quorumbench.runner.loop import Prepared

FLIPS: dict[int, int] = {}
"""Model number -> how many answers of each of its tasks to flip (``--flips``)."""


class FlipEvaluator(OracleEvaluator):
    """The oracle, answering the first ``k`` samples of each task the other way."""

    def __init__(self, wrong_every: int, work_s: float) -> None:
        super().__init__(wrong_every, work_s)
        self.flipped: set[str] = set()

    def _backend(self, ref: str, _options: BackendOptions) -> ModelBackend:
        honest_right = model_number(ref) % self.wrong_every != 0

        def answer(prompt: str) -> str:
            question = prompt.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:").strip()
            right = honest_right != (question in self.flipped)
            return f"#### {self.gold[question]}" if right else WRONG_ANSWER

        return MockBackend(answer=answer)

    def run(self, prepared: Prepared, backend: ModelBackend, progress: Any) -> RunResult:
        k = FLIPS.get(model_number(prepared.model_ref), 0)
        self.flipped = {generate_item(s.id).question for s in prepared.samples[:k]}
        return super().run(prepared, backend, progress)


def main() -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--flips", required=True, help="JSON {model number: k}")
    args, rest = parser.parse_known_args()
    FLIPS.update({int(n): int(k) for n, k in json.loads(args.flips).items()})
    chaos_runner.OracleEvaluator = FlipEvaluator  # main() builds it
    return chaos_runner.main(rest)


if __name__ == "__main__":
    sys.exit(main())
