"""The methodology page states the consensus rule the server applies."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from quorumbench.api.app import create_app


@pytest.mark.parametrize(("tolerance", "shown"), [(0.2, "20%"), (0.4, "40%")])
def test_the_methodology_page_shows_the_per_sample_tolerance(make_ctx, tolerance, shown):
    ctx = make_ctx(sample_tolerance=tolerance, agreement_threshold=0.3)
    with TestClient(create_app(ctx.settings, context=ctx, run_scheduler=False)) as client:
        page = client.get("/methodology").text
    assert f"differs from that consensus on at most {shown} of the task" in page
    assert "must also lie within 0.3 of each other" in page
