"""lm-evaluation-harness side of ``eval_throughput.py``; runs inside its own venv.

Usage (the parent script calls it): ``python _lmeval_child.py SPEC.json OUT.json``.

SPEC holds ``model_dir``, ``include_path`` and ``tasks`` (lm-eval task names, each
with ``predict_only``: generate without scoring). The model is loaded once, untimed;
then each task is one timed ``simple_evaluate`` call.
OUT gets, per task, the seconds, lm-eval's own metrics and per-document responses:
per-option log-likelihoods (multiple choice) or the raw generated text, together with
the request arguments lm-eval actually built (to check that the prompts match ours).

This file must not import quorumbench: the venv it runs in has lm-eval, not us.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _docs(samples: list[dict[str, Any]], output_type: str) -> list[dict[str, Any]]:
    """One entry per document (lm-eval logs a document once per filter)."""
    seen: dict[int, dict[str, Any]] = {}
    for sample in samples:
        doc_id = int(sample["doc_id"])
        if doc_id in seen:
            seen[doc_id]["metrics"][sample["filter"]] = {
                m: sample.get(m) for m in sample.get("metrics", [])
            }
            continue
        entry: dict[str, Any] = {
            "doc_id": doc_id,
            "id": sample["doc"]["id"],
            "arguments": _jsonable(sample["arguments"]),
            "metrics": {sample["filter"]: {m: sample.get(m) for m in sample.get("metrics", [])}},
        }
        if output_type == "multiple_choice":
            # resps: one list per option request, each [(loglikelihood, is_greedy)]
            entry["loglikelihoods"] = [float(r[0][0]) for r in sample["resps"]]
        else:
            entry["response"] = sample["resps"][0][0]
        seen[doc_id] = entry
    return [seen[k] for k in sorted(seen)]


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out_path = Path(sys.argv[2])

    import lm_eval
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    versions = {
        name: importlib.metadata.version(name) for name in ("lm_eval", "transformers", "torch")
    }
    print(f"[lm-eval child] versions {versions}, torch threads {torch.get_num_threads()}")
    print(f"[lm-eval child] loading {spec['model_dir']} (float32, cpu, batch_size 1)", flush=True)
    t0 = time.perf_counter()
    lm = HFLM(pretrained=spec["model_dir"], dtype="float32", device="cpu", batch_size=1)
    load_s = time.perf_counter() - t0
    print(f"[lm-eval child] model loaded in {load_s:.1f}s", flush=True)

    report: dict[str, Any] = {"versions": versions, "load_s": load_s, "tasks": {}}
    for task in spec["tasks"]:
        name, output_type = task["name"], task["output_type"]
        print(f"[lm-eval child] simple_evaluate({name!r}) ...", flush=True)
        task_manager = TaskManager(include_path=spec["include_path"])
        t0 = time.perf_counter()
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=[name],
            task_manager=task_manager,
            log_samples=True,
            bootstrap_iters=0,
            # generation only (HumanEval: its code_eval metric would run the programs)
            predict_only=bool(task.get("predict_only")),
        )
        seconds = time.perf_counter() - t0
        assert results is not None
        docs = _docs(results["samples"][name], output_type)
        print(f"[lm-eval child] {name}: {len(docs)} docs in {seconds:.1f}s", flush=True)
        report["tasks"][name] = {
            "seconds": seconds,
            "metrics": _jsonable(results["results"][name]),
            "docs": docs,
        }
        out_path.write_text(json.dumps(report, indent=1), encoding="utf-8")
    out_path.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
