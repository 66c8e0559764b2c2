"""The report without a server: the model checks only (``checks.py``), for
``quorumbench submission validate`` without ``--server``.

What only the server's database knows is not checked, and the report says so (the
``account-unchecked`` warning): the account's earn-your-submit quota and weekly limit,
duplicates of registered models, whether an adapter's base is registered, and the cost
estimate over the server's active benchmarks. The model checks run against the
settings given (the size limit, the licence allow-list, pickles), which may differ
from the server's; a path on this machine's disk is refused, as the server refuses it
to anyone but an admin.
"""

from __future__ import annotations

from quorumbench.evaluation.endpoints import Resolver
from quorumbench.services.submissions.checks import (
    Inspector,
    Submission,
    detected,
    inspect_submission,
)
from quorumbench.services.submissions.report import Findings, SubmissionReport
from quorumbench.settings import ServerSettings

ACCOUNT_CODES = frozenset(
    {
        "weekly-limit",
        "quota-not-earned",
        "limits-ok",
        "limits-exempt",
        "duplicate-ref",
        "duplicate-weights",
        "already-registered",
        "base-pinned",
        "cost-estimate",
    }
)
"""Findings only the server's database can make (``service.py``); never offline."""
UNCHECKED = (
    "validated offline, against this machine's settings (at most {max_params:,} "
    "parameters; licences: {licences}; pickled weights {pickles}): the account's quota "
    "and weekly limit, duplicates of registered models and the cost estimate are the "
    "server's to check (quorumbench submission validate --server URL)"
)


def offline_report(
    settings: ServerSettings,
    submission: Submission,
    inspector: Inspector,
    *,
    resolve: Resolver | None = None,
) -> SubmissionReport:
    """The model checks of ``submission`` and the ``account-unchecked`` warning."""
    inspected = inspect_submission(settings, submission, inspector, admin=False, resolve=resolve)
    found = Findings()
    found.extend(inspected.findings)
    found.warning(
        "account-unchecked",
        UNCHECKED.format(
            max_params=settings.max_params,
            licences=", ".join(settings.license_allowlist) or "any",
            pickles="allowed" if settings.allow_pickle else "refused",
        ),
    )
    return SubmissionReport(
        ok=found.refusal is None,
        ref=submission.ref,
        pinned_ref=inspected.meta.ref.canonical() if inspected.meta else None,
        findings=found.ordered(),
        metadata=detected(inspected, submission),
        quota=None,
        estimate=None,
        existing=None,
    )
