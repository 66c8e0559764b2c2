"""A LoRA adapter's size is its effective size (base + adapter), with the adapter's own
beside it, on every page, in the downloads, the static export and the API.

In the seeded world alpha-1b-lora has 4M parameters of its own on alpha-1b (1.1B):
1.104B in all.
"""

from __future__ import annotations

import csv
import io
import json
import re

from quorumbench.web.export import export_site

from .seed import BASE_PARAMS

OWN = 4_000_000
EFFECTIVE = BASE_PARAMS + OWN


def _row(html: str, model_id: int) -> str:
    match = re.search(rf'<tr data-model="{model_id}".*?</tr>', html, re.S)
    assert match, f"no row for model {model_id}"
    return match[0]


def test_the_board_shows_the_effective_size_and_the_adapter_size(client, seed):
    lora, base = seed.ids["alpha-1b-lora"], seed.ids["alpha-1b"]
    html = client.get("/").text
    row = _row(html, lora)
    assert f'data-params="{EFFECTIVE}"' in row
    cell = re.search(r'<td class="num size">(.*?)</td>', row, re.S)
    assert cell and cell[1].startswith('1.1B<div class="adapter-size"')
    assert "adapter 4M</div>" in cell[1]
    plain = re.search(r'<td class="num size">(.*?)</td>', _row(html, base), re.S)
    assert plain and plain[1] == "1.1B"  # no adapter line for a base model


def test_the_board_downloads_carry_both_sizes(client, seed):
    rows = {r["model"]: r for r in client.get("/?format=json").json()["rows"]}
    lora = rows["alpha-1b-lora"]
    assert (lora["params"], lora["effective_params"], lora["adapter_params"]) == (
        OWN,
        EFFECTIVE,
        OWN,
    )
    base = rows["alpha-1b"]
    assert (base["params"], base["effective_params"], base["adapter_params"]) == (
        BASE_PARAMS,
        BASE_PARAMS,
        None,
    )
    assert rows["chat-endpoint"]["effective_params"] is None
    table = {r["model"]: r for r in csv.DictReader(io.StringIO(client.get("/?format=csv").text))}
    assert table["alpha-1b-lora"]["effective_params"] == str(EFFECTIVE)
    assert table["alpha-1b-lora"]["adapter_params"] == str(OWN)
    assert table["alpha-1b"]["adapter_params"] == ""


def test_size_filters_and_sorting_use_the_effective_size(client):
    def names(query: str) -> list[str]:
        return [r["model"] for r in client.get(f"/?format=json&{query}").json()["rows"]]

    assert "alpha-1b-lora" not in names("max_params=10M")
    assert sorted(names("min_params=1.1B&max_params=1.2B")) == ["alpha-1b", "alpha-1b-lora"]
    assert names("min_params=1.101B&max_params=2B") == ["alpha-1b-lora"]
    by_size = names("sort=params&order=asc")
    assert by_size.index("alpha-1b") < by_size.index("alpha-1b-lora") < by_size.index("beta-7b")


def test_the_model_page_shows_base_and_adapter(client, seed):
    lora, base = seed.ids["alpha-1b-lora"], seed.ids["alpha-1b"]
    html = client.get(f"/models/{lora}").text
    size = re.search(r'<dd id="size">(.*?)</dd>', html, re.S)
    assert size and size[1].startswith("1.1B ")
    assert "(base 1.1B + adapter 4M)" in size[1]
    body = client.get(f"/models/{lora}?format=json").json()
    assert (body["params"], body["effective_params"], body["adapter_params"]) == (
        OWN,
        EFFECTIVE,
        OWN,
    )
    assert body["base_params"] == BASE_PARAMS
    html = client.get(f"/models/{base}").text
    size = re.search(r'<dd id="size">(.*?)</dd>', html, re.S)
    assert size and size[1] == "1.1B"


def test_compare_shows_each_size(client, seed):
    lora, gamma = seed.ids["alpha-1b-lora"], seed.ids["gamma-135m"]
    html = client.get(f"/compare?models={lora},{gamma}").text
    sizes = re.findall(r'<div class="size">(.*?)</div></th>', html, re.S)
    assert len(sizes) == 2
    assert sizes[0].startswith("1.1B") and "adapter 4M" in sizes[0]
    assert sizes[1] == "135M"


def test_the_api_gives_the_effective_size(client, seed):
    lora = client.get(f"/v0/models/{seed.ids['alpha-1b-lora']}").json()
    assert (lora["params"], lora["effective_params"]) == (OWN, EFFECTIVE)
    assert (lora["adapter_params"], lora["base_params"]) == (OWN, BASE_PARAMS)
    listed = {m["name"]: m for m in client.get("/v0/models").json()}
    assert listed["alpha-1b-lora"]["effective_params"] == EFFECTIVE
    gguf = listed["smol-q4"]
    assert (gguf["effective_params"], gguf["adapter_params"], gguf["base_params"]) == (
        135_000_000,
        None,
        None,
    )
    assert listed["chat-endpoint"]["effective_params"] is None


def test_the_static_export_shows_the_effective_size(seed, tmp_path):
    export_site(seed.ctx, tmp_path / "site", server_url="http://example.invalid")
    lora = seed.ids["alpha-1b-lora"]
    row = _row((tmp_path / "site" / "index.html").read_text(encoding="utf-8"), lora)
    assert f'data-params="{EFFECTIVE}"' in row and "adapter 4M</div>" in row
    board = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))
    found = next(r for r in board["rows"] if r["model_id"] == lora)
    assert (found["effective_params"], found["adapter_params"]) == (EFFECTIVE, OWN)
    page = (tmp_path / "site" / "models" / f"{lora}.html").read_text(encoding="utf-8")
    assert "(base 1.1B + adapter 4M)" in page


def test_an_adapter_of_unknown_base_size_shows_its_own_size():
    from quorumbench.services.model_metadata import ModelSize
    from quorumbench.web.render import environment

    macros = environment().get_template("_size.html").module
    unknown = ModelSize(None, 230_400, None)
    assert str(macros.size(unknown)) == (
        '—<div class="adapter-size" title="its base’s size is unknown">adapter 230K</div>'
    )
    assert str(macros.size_long(unknown)) == (
        '— <span class="muted adapter-size">(base size unknown; adapter 230K)</span>'
    )
    demo = ModelSize(134_745_408, 230_400, 134_515_008)  # the demo's LoRA on SmolLM2
    assert str(macros.size_long(demo)) == (
        '135M <span class="muted adapter-size">(base 135M + adapter 230K)</span>'
    )
    assert str(macros.size(ModelSize(7_000_000_000))) == "7B"
