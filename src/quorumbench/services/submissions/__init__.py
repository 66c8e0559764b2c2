"""One validation for every way a model is submitted (the API, the site, the CLI, a
pull request), and the registration that refuses exactly what it reports.

``report.py`` holds the report (its findings, the metadata read, the account's
limits, a cost estimate); ``checks.py`` the checks that read the model itself (no
database: usable offline); ``estimate.py`` the cost estimate; ``service.py`` the
checks the database answers (limits, duplicates) and the registration;
``offline.py`` the report without a server; ``file.py`` a pull request's submission
file.
"""

from quorumbench.services.submissions.checks import Inspector, Submission, inspect_submission
from quorumbench.services.submissions.file import FileReading, read_submission_file
from quorumbench.services.submissions.offline import offline_report
from quorumbench.services.submissions.report import (
    CostEstimate,
    DetectedMetadata,
    ExistingModel,
    Finding,
    SubmissionReport,
)
from quorumbench.services.submissions.service import (
    Registration,
    Validation,
    register_submission,
    validate_submission,
)

__all__ = [
    "CostEstimate",
    "DetectedMetadata",
    "ExistingModel",
    "FileReading",
    "Finding",
    "Inspector",
    "Registration",
    "Submission",
    "SubmissionReport",
    "Validation",
    "inspect_submission",
    "offline_report",
    "read_submission_file",
    "register_submission",
    "validate_submission",
]
