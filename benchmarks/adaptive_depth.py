"""Adaptive depth against fixed depth: a simulation (run by hand; not a test).

A population of synthetic models with known true accuracies (some spread far apart,
some in tight clusters) is measured epoch after epoch on one benchmark. Each epoch a
policy spends the same number of samples; the policy code is the server's own:
``core.scheduling.depth_tiers`` and ``plan_epoch``, with rows, intervals and
accumulators from ``core.leaderboard`` exactly as the server keeps them. A task of
``n`` samples draws each sample correct with the model's true accuracy (the runners
agreed: per-sample consensus values are 0 or 1).

* ``fixed``: one tier of ``--shallow`` samples (every model every epoch, when the
  budget allows: today's behaviour);
* ``adaptive``: tiers ``--shallow``, then ``--tiers`` (default 5, 25, 100).

After each epoch it prints Kendall's tau-b between the estimated and the true order
and top-10 precision (the share of the true top 10 in the estimated top 10), for both
policies, averaged over ``--runs`` seeds. It ends with one line per policy::

    RESULT policy=<adaptive|fixed> tau=<final tau> top10=<final precision> samples=<total>

and how many samples the adaptive policy needed to reach the fixed policy's final tau
(the target: at most half).

    python benchmarks/adaptive_depth.py            # 500 models, 20 epochs, 5 runs
    python benchmarks/adaptive_depth.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from quorumbench.core.leaderboard import Accumulator, interval, overlapping
from quorumbench.core.scheduling import (
    Budget,
    PairStats,
    Ranked,
    depth_tiers,
    plan_epoch,
    task_depth,
)

BENCHMARK = 1


def population(n: int, rng: random.Random) -> list[float]:
    """True accuracies: 60% spread over [0.05, 0.95], 40% in 8 tight clusters."""
    spread = [rng.uniform(0.05, 0.95) for _ in range(int(n * 0.6))]
    clustered = []
    centres = [rng.uniform(0.1, 0.9) for _ in range(8)]
    while len(spread) + len(clustered) < n:
        centre = centres[len(clustered) % len(centres)]
        clustered.append(min(1.0, max(0.0, centre + rng.uniform(-0.005, 0.005))))
    return spread + clustered


def kendall_tau_b(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either ranking handled), O(n²)."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(xs)
    for i in range(n):
        xi, yi = xs[i], ys[i]
        for j in range(i + 1, n):
            dx, dy = xs[j] - xi, ys[j] - yi
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator else 0.0


def top_precision(estimated: Sequence[float], truth: Sequence[float], k: int) -> float:
    best = set(sorted(range(len(truth)), key=lambda i: -truth[i])[:k])
    shown = sorted(range(len(estimated)), key=lambda i: (-estimated[i], i))[:k]
    return sum(1 for i in shown if i in best) / k


@dataclass
class World:
    truth: list[float]
    rng: random.Random
    accs: dict[int, Accumulator] = field(default_factory=dict)
    samples: int = 0

    def estimates(self) -> list[float]:
        return [
            interval(self.accs[m]).score if m in self.accs else 0.5 for m in range(len(self.truth))
        ]

    def epoch(self, tiers: Sequence[int], budget: int, top_k: int) -> None:
        rows = {m: interval(acc) for m, acc in self.accs.items()}
        ranked = [Ranked(m, i.score, i.ci_low, i.ci_high) for m, i in rows.items()]
        tier_of = depth_tiers(ranked, top_k, len(tiers))
        ids = list(rows)
        flags = dict(
            zip(
                ids,
                overlapping([(rows[m].score, rows[m].ci_low, rows[m].ci_high) for m in ids]),
                strict=True,
            )
        )
        pairs = []
        for m in range(len(self.truth)):
            tier = tier_of.get(m, 0)
            acc = self.accs.get(m)
            width = rows[m].ci_high - rows[m].ci_low if m in rows else 1.0
            n = acc.n_samples if acc else 0
            pairs.append(
                PairStats(
                    m,
                    BENCHMARK,
                    n,
                    width,
                    flags.get(m, False),
                    depth=task_depth(tier, n, tiers),
                    tier=tier,
                    tier_depth=tiers[tier],
                )
            )
        for pair in plan_epoch(pairs, Budget(len(pairs), budget), bucket=tiers[0]):
            draws = [
                1.0 if self.rng.random() < self.truth[pair.model_id] else 0.0
                for _ in range(pair.depth)
            ]
            score = sum(draws) / len(draws)
            self.accs[pair.model_id] = self.accs.get(pair.model_id, Accumulator()).add_task(
                score, draws
            )
            self.samples += pair.depth


def run(
    policy: str, truth: list[float], seed: int, args: argparse.Namespace
) -> list[tuple[float, float, int]]:
    tiers = (args.shallow,) if policy == "fixed" else (args.shallow, *args.tiers)
    world = World(truth, random.Random(seed))
    trace = []
    for _ in range(args.epochs):
        world.epoch(tiers, args.budget, args.top_k)
        estimated = world.estimates()
        trace.append(
            (kendall_tau_b(estimated, truth), top_precision(estimated, truth, 10), world.samples)
        )
    return trace


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", type=int, default=500)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--runs", type=int, default=5, help="seeds averaged")
    p.add_argument("--shallow", type=int, default=5, help="samples of the shallow tier")
    p.add_argument("--tiers", type=int, nargs="*", default=[25, 100], help="deeper tiers")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument(
        "--budget", type=int, default=None, help="samples per epoch (default models x shallow)"
    )
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--quick", action="store_true", help="200 models, 10 epochs, 2 runs")
    args = p.parse_args()
    if args.quick:
        args.models, args.epochs, args.runs = 200, 10, 2
    args.budget = args.budget or args.models * args.shallow
    traces: dict[str, list[list[tuple[float, float, int]]]] = {"fixed": [], "adaptive": []}
    for r in range(args.runs):
        truth = population(args.models, random.Random(args.seed + r))
        for policy in traces:
            traces[policy].append(run(policy, truth, args.seed + 1000 * r, args))
    print(
        f"{args.models} models, budget {args.budget} samples per epoch, tiers "
        f"{[args.shallow, *args.tiers]}, top-{args.top_k}, {args.runs} runs (mean)"
    )
    head = f"{'epoch':>5} {'samples':>8} | {'fixed tau':>9} {'top10':>6} | "
    print(head + f"{'adaptive tau':>12} {'top10':>6}")
    mean = {
        policy: [
            (
                statistics.fmean(t[e][0] for t in runs),
                statistics.fmean(t[e][1] for t in runs),
                round(statistics.fmean(t[e][2] for t in runs)),
            )
            for e in range(args.epochs)
        ]
        for policy, runs in traces.items()
    }
    for e in range(args.epochs):
        f, a = mean["fixed"][e], mean["adaptive"][e]
        print(f"{e + 1:>5} {f[2]:>8} | {f[0]:>9.4f} {f[1]:>6.2f} | {a[0]:>12.4f} {a[1]:>6.2f}")
    final_fixed = mean["fixed"][-1]
    reached = next((a for a in mean["adaptive"] if a[0] >= final_fixed[0]), None)
    if reached is None:
        print(f"adaptive never reached the fixed policy's final tau {final_fixed[0]:.4f}")
    else:
        share = reached[2] / final_fixed[2]
        print(
            f"adaptive reached the fixed policy's final tau {final_fixed[0]:.4f} after "
            f"{reached[2]} samples: {share:.2f}x of fixed's {final_fixed[2]} (target <= 0.5)"
        )
    final_top = final_fixed[1]
    top_reached = next((a for a in mean["adaptive"] if a[1] >= final_top), None)
    if top_reached is not None:
        print(
            f"adaptive reached the fixed policy's final top-10 precision {final_top:.2f} after "
            f"{top_reached[2]} samples: {top_reached[2] / final_fixed[2]:.2f}x"
        )
    for policy in ("adaptive", "fixed"):
        tau, top10, samples = mean[policy][-1]
        print(f"RESULT policy={policy} tau={tau:.4f} top10={top10:.2f} samples={samples}")


if __name__ == "__main__":
    main()
