"""The Jinja2 environment and the links a page uses, live or in a static export.

Templates never write a URL themselves: they ask ``links`` (a :class:`Links`), which
gives absolute paths on the live server and relative ``.html`` paths in an export, so
an exported site works from any directory and from ``file://``.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from quorumbench import __version__
from quorumbench.core.consensus import SAMPLE_EPSILON
from quorumbench.services.views import FAILURES_SHOWN
from quorumbench.web import charts

PACKAGE_DIR = Path(__file__).parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"
TYPE_LABELS = {"base": "base", "lora": "LoRA", "gguf": "GGUF", "endpoint": "endpoint"}


class Links:
    """URLs of the live site."""

    static_site = False

    def static(self, name: str) -> str:
        return f"/static/{name}?v={__version__}"

    def home(self, **params: Any) -> str:
        query = {k: v for k, v in params.items() if v not in (None, "")}
        return "/" + (f"?{urlencode(query)}" if query else "")

    def model(self, model_id: int) -> str:
        return f"/models/{model_id}"

    def task(self, task_id: int) -> str:
        return f"/tasks/{task_id}"

    def page(self, name: str) -> str | None:
        """A page by name (``tasks``, ``runners``, ``compare``, ``methodology``, ``submit``)."""
        return f"/{name}"

    def data(self, path: str, fmt: str) -> str | None:
        """A download of ``path``'s table as ``fmt`` (json or csv)."""
        sep = "&" if "?" in path else "?"
        return f"{path}{sep}format={fmt}"


class StaticLinks(Links):
    """URLs inside an exported site, relative to a page ``depth`` folders down."""

    static_site = True
    EXPORTED = ("methodology", "submit")

    def __init__(self, depth: int = 0) -> None:
        self.up = "../" * depth

    def static(self, name: str) -> str:
        return f"{self.up}static/{name}"

    def home(self, **params: Any) -> str:
        return f"{self.up}index.html"

    def model(self, model_id: int) -> str:
        return f"{self.up}models/{model_id}.html"

    def page(self, name: str) -> str | None:
        return f"{self.up}{name}.html" if name in self.EXPORTED else None

    def data(self, path: str, fmt: str) -> str | None:
        return None


def default_order(sort: str) -> str:
    """Scores, sizes, samples and dates read best-first downwards; ranks and names up."""
    return "asc" if sort in ("rank", "model", "type") else "desc"


def fmt_params(params: int | None) -> str:
    if params is None:
        return "—"
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if params >= size:
            return f"{params / size:.3g}{unit}"
    return str(params)


def fmt_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


def fmt_score(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def fmt_figure(value: float | None) -> str:
    """A measured figure to three significant digits (``—`` when not measured)."""
    return "—" if value is None else f"{value:.3g}"


def fmt_bytes(value: float | None) -> str:
    """A memory size in MiB or GiB (``—`` when not measured)."""
    if value is None:
        return "—"
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.0f} MiB"


def fmt_counts(counts: dict[str, int]) -> str:
    """``{"estimate": 12, "rapl": 3}`` → ``estimate 12, rapl 3``."""
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "—"


@cache
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        params=fmt_params,
        time=fmt_time,
        score=fmt_score,
        figure=fmt_figure,
        bytes=fmt_bytes,
        counts=fmt_counts,
    )
    env.globals.update(
        interval_bar=charts.interval_bar,
        history_chart=charts.history_chart,
        type_label=TYPE_LABELS.get,
        default_order=default_order,
        version=__version__,
        failures_shown=FAILURES_SHOWN,
        # a per-sample score is marked off the consensus exactly when the rule counts it
        sample_epsilon=SAMPLE_EPSILON,
    )
    return env


def render(template: str, links: Links, **context: Any) -> str:
    return environment().get_template(template).render(links=links, **context)
