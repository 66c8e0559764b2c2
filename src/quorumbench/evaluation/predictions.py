"""The canonical per-sample prediction, and the digest runners agree on.

A run's raw outputs are not what independent runners should compare: the same
weights give log-likelihoods that differ in their last rounded digit between batch
sizes (a padded batch adds up in another order; even the batch that first filled a
backend's cache of the shared primer matters), so ``outputs_sha256`` differs while
every answer is the same. What the model *answered* does not differ. That answer, one
per sample, is the canonical prediction:

* a ``choice`` benchmark: the index of the chosen option, an ``int`` (the option with
  the highest rounded log-likelihood, the first on a tie, or the letter the model
  named), or ``None`` when a letter reply named no option. TruthfulQA-MC2 scores the
  probability mass on the true options, a number that moves with the log-likelihoods'
  last digits and is compared with a tolerance through ``sample_scores``; its
  prediction is also the highest-ranked option, a discrete answer that digests can
  compare exactly (rounding the probability vector would still flip at the rounding
  boundaries).
* a ``generate`` benchmark: the extracted answer, a ``str``, exactly as the
  benchmark's scorer extracted it (gsm8k and arith: the normalised final number;
  a custom benchmark: by its ``extract`` rule), or ``None`` when none was found.

Both come from the benchmark's :class:`~quorumbench.evaluation.benchmark.Scored`
``prediction``, so what a prediction is for one benchmark is fixed by its version
(the scorer is part of it). ``predictions_sha256`` is
:func:`quorumbench.core.canonical.predictions_digest` of the list, in sampling order.
"""

from __future__ import annotations

from collections.abc import Sequence

from quorumbench.core.canonical import predictions_digest
from quorumbench.evaluation.benchmark import BenchmarkKind, Scored

Prediction = int | str | None
"""One sample's canonical prediction: an option index, an extracted answer, or none."""

__all__ = ["Prediction", "canonical_prediction", "predictions_digest", "predictions_of"]


def canonical_prediction(kind: BenchmarkKind, scored: Scored) -> Prediction:
    """The canonical prediction of one scored sample of a benchmark of ``kind``.

    Raises:
        ValueError: a choice benchmark's prediction is not an option index written as a
            decimal string (the :class:`Scored` contract).
    """
    prediction = scored.prediction
    if prediction is None or kind == "generate":
        return prediction
    if not (prediction.isascii() and prediction.isdigit() and str(int(prediction)) == prediction):
        raise ValueError(
            f"a choice benchmark's prediction must be an option index, not {prediction!r}"
        )
    return int(prediction)


def predictions_of(kind: BenchmarkKind, scored: Sequence[Scored]) -> list[Prediction]:
    """The canonical predictions of a run's scored samples, in order."""
    return [canonical_prediction(kind, s) for s in scored]
