"""A submission's validation report without registering anything (a dry run)."""

from __future__ import annotations

from fastapi import APIRouter

from quorumbench.api.deps import Context, Submitter
from quorumbench.api.schemas import ModelIn
from quorumbench.services.submissions import Submission, SubmissionReport, validate_submission

router = APIRouter(prefix="/v0/submissions", tags=["models"])


@router.post("/validate", response_model=SubmissionReport)
def validate(body: ModelIn, ctx: Context, principal: Submitter) -> SubmissionReport:
    """Every check ``POST /v0/models`` makes of this body, answered as a report (200,
    whether or not it would be accepted: ``ok`` says), registering nothing (needs the
    ``model:register`` scope). The same ref posted to ``POST /v0/models`` is refused
    exactly when this report has an error."""
    found = validate_submission(ctx, principal, Submission(body.ref, body.name, body.family))
    return found.report
