"""The server's settings for asks (``QB_ASK_*``): live evaluation of people's own
endpoints (``services/live.py``) and its limits.

A mixin of :class:`~quorumbench.settings.ServerSettings` (kept here so that module
stays small); every field reads ``QB_<NAME>`` like the others.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class AskSettings(BaseModel):
    """Limits of asks and of the live evaluation of people's endpoints."""

    ask_workers: int = Field(
        2,
        ge=0,
        le=64,
        description="Threads of this server process that evaluate people's endpoints "
        "(0: asks with endpoints are refused).",
    )
    ask_max_queued: int = Field(
        16,
        ge=1,
        description="Asks with endpoints waiting or running in this process; past it new "
        "ones are refused (503) until one ends.",
    )
    ask_max_samples: int = Field(
        200,
        ge=1,
        description="Most samples one endpoint is evaluated on per ask (the plan's budget, "
        "capped at this).",
    )
    ask_per_account: int = Field(
        10,
        ge=0,
        description="Asks with endpoints one account may make per QB_ASK_WINDOW_HOURS "
        "(429 past it; 0: none).",
    )
    ask_window_hours: float = Field(
        24.0, gt=0, description="The window of QB_ASK_PER_ACCOUNT, in hours."
    )
    ask_endpoint_concurrency: int = Field(
        4, ge=1, le=64, description="Requests in flight to one endpoint at once, per ask."
    )
    ask_endpoint_rps: float = Field(
        5.0,
        ge=0,
        description="Requests per second sent to one endpoint URL by this process, all "
        "asks together (0: no limit).",
    )
    ask_timeout_s: float = Field(
        60.0, gt=0, description="Timeout of one request to a person's endpoint."
    )
    ask_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Retries of a request to a person's endpoint that failed on the network, "
        "timed out or answered 429/5xx (exponential backoff).",
    )
    ask_allow_private_endpoints: bool = Field(
        False,
        description="Allow asks to evaluate endpoints on loopback, private, link-local or "
        "metadata addresses (tests and private deployments).",
    )
    ask_planner_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="An OpenAI-compatible endpoint (base URL, …/v1) for the optional LLM "
        "planner; unset: the offline planner only.",
    )
    ask_planner_model: str | None = Field(
        None, min_length=1, description="The model the LLM planner asks (with the URL)."
    )
    ask_planner_api_key: SecretStr | None = Field(
        None, description="The LLM planner endpoint's API key (never logged)."
    )
    ask_planner_timeout_s: float = Field(
        20.0, gt=0, description="Timeout of the LLM planner; past it the offline planner answers."
    )
