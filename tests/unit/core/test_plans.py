"""The plan document: parsing, canonical bytes and id, filter semantics, every error."""

from __future__ import annotations

import copy

import pytest

from quorumbench.core.plans import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_ENDPOINTS,
    MAX_LIST,
    Endpoint,
    ModelSelection,
    Plan,
    PlanError,
    parse_plan,
)
from quorumbench.core.taxonomy import LABEL_KEYS, TAXONOMY_VERSION

FULL = {
    "version": 1,
    "labels": {
        "skill": ["reasoning", "knowledge"],
        "subject": ["science/math", "hass"],
        "target": ["local/kr", "general"],
        "format": ["mcqa", "short-form"],
        "language": ["ko", "en"],
    },
    "pillars": ["math", "reasoning"],
    "benchmarks": ["mmlu", "gsm8k"],
    "models": {"select": "filter", "kinds": ["lora", "hf"], "min_params": 1, "max_params": 10},
    "endpoints": [
        {"url": "https://b.example/v1", "model": "m2"},
        {"url": "http://a.example:8080/v1", "model": "m1"},
    ],
    "budget": 250,
    "versions": {
        "taxonomy": 1,
        "planner": "offline/1",
        "benchmarks": {"mmlu": 2, "gsm8k": 3},
        "seed": "00ff",
    },
}


def reordered(doc):
    """The same plan with every list and object in another order."""
    out = copy.deepcopy(doc)
    out["labels"] = {k: list(reversed(v)) for k, v in reversed(list(out["labels"].items()))}
    out["pillars"].reverse()
    out["benchmarks"] = [*reversed(out["benchmarks"]), "gsm8k"]  # a duplicate too
    out["models"]["kinds"].reverse()
    out["endpoints"].reverse()
    out["versions"]["benchmarks"] = dict(reversed(list(out["versions"]["benchmarks"].items())))
    return dict(reversed(list(out.items())))


def test_empty_document_takes_the_defaults():
    plan = parse_plan({})
    assert plan.labels == {}
    assert plan.pillars == plan.benchmarks == plan.endpoints == ()
    assert plan.models == ModelSelection()
    assert plan.budget == DEFAULT_BUDGET
    assert plan.versions == {"taxonomy": TAXONOMY_VERSION}
    assert plan.as_json()["labels"] == {k: [] for k in LABEL_KEYS}


def test_full_document_round_trips():
    plan = parse_plan(FULL)
    again = parse_plan(plan.as_json())
    assert again == plan
    assert again.canonical() == plan.canonical()
    assert plan.label_values("skill") == ("knowledge", "reasoning")
    assert plan.label_values("nothing") == ()
    assert plan.models == ModelSelection("filter", (), ("hf", "lora"), 1, 10)
    assert plan.endpoints[0] == Endpoint("http://a.example:8080/v1", "m1")
    assert list(plan.versions["benchmarks"]) == ["gsm8k", "mmlu"]


def test_order_and_duplicates_do_not_change_bytes_or_id():
    plan, other = parse_plan(FULL), parse_plan(reordered(FULL))
    assert other.canonical() == plan.canonical()
    assert other.id == plan.id
    assert len(plan.id) == 64 and int(plan.id, 16) >= 0


def test_a_different_plan_has_a_different_id():
    changed = copy.deepcopy(FULL)
    changed["budget"] = 251
    assert parse_plan(changed).id != parse_plan(FULL).id


def test_empty_label_lists_are_dropped():
    plan = parse_plan({"labels": {"skill": [], "language": ["ko"]}})
    assert dict(plan.labels) == {"language": ("ko",)}


def test_public_drops_endpoints_and_keeps_the_rest():
    plan = parse_plan(FULL)
    public = plan.public()
    assert public.endpoints == ()
    assert public.as_json() == {**plan.as_json(), "endpoints": []}
    assert public.id != plan.id
    assert "example" not in public.canonical().decode()


@pytest.mark.parametrize(
    ("wanted", "labels", "expected"),
    [
        ({}, {}, True),
        ({"skill": ["reasoning"]}, {"skill": "reasoning"}, True),
        ({"skill": ["reasoning", "knowledge"]}, {"skill": "knowledge"}, True),
        ({"skill": ["reasoning"]}, {"skill": "value"}, False),
        ({"skill": ["reasoning"]}, {"subject": "science"}, False),  # label missing
        ({"skill": ["reasoning"]}, {"skill": None}, False),
        ({"subject": ["science"]}, {"subject": "science"}, True),
        ({"subject": ["science"]}, {"subject": "science/math"}, True),  # coarse covers fine
        ({"subject": ["science/math"]}, {"subject": "science/math"}, True),
        ({"subject": ["science/math"]}, {"subject": "science"}, False),  # fine is exact
        ({"subject": ["science/math"]}, {"subject": "science/mathematics"}, False),
        ({"subject": ["tech"]}, {"subject": "technology/x"}, False),  # prefix needs '/'
        ({"subject": ["tech", "hass/law"]}, {"subject": "hass/law"}, True),
        (
            {"skill": ["reasoning"], "language": ["ko"]},
            {"skill": "reasoning", "language": "en"},
            False,
        ),
        (
            {"skill": ["reasoning"], "language": ["ko"], "subject": ["science"]},
            {"skill": "reasoning", "language": "ko", "subject": "science/physics"},
            True,
        ),
    ],
)
def test_matches(wanted, labels, expected):
    assert parse_plan({"labels": wanted}).matches(labels) is expected


@pytest.mark.parametrize(
    ("doc", "name", "pillar", "expected"),
    [
        ({}, "gsm8k", "math", True),
        ({}, "custom", None, True),
        ({"benchmarks": ["gsm8k"]}, "gsm8k", "math", True),
        ({"benchmarks": ["gsm8k"]}, "mmlu", "reasoning", False),
        ({"pillars": ["math"]}, "gsm8k", "math", True),
        ({"pillars": ["math"]}, "mmlu", "reasoning", False),
        ({"pillars": ["math"]}, "custom", None, False),
        ({"pillars": ["math"], "benchmarks": ["mmlu"]}, "mmlu", "reasoning", False),
        ({"pillars": ["reasoning"], "benchmarks": ["mmlu"]}, "mmlu", "reasoning", True),
    ],
)
def test_covers_benchmark(doc, name, pillar, expected):
    assert parse_plan(doc).covers_benchmark(name, pillar) is expected


def _with(path, value):
    doc = copy.deepcopy(FULL)
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


def _endpoint(**item):
    return {"endpoints": [item]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "a plan is a JSON object"),
        ({"budgt": 1}, "plan: unknown key(s) 'budgt'"),
        ({"version": 2}, "plan version 2: this server reads version 1"),
        ({"version": True}, "plan version True"),
        ({"budget": 0}, f"budget must be an integer from 1 to {MAX_BUDGET}"),
        ({"budget": MAX_BUDGET + 1}, "budget must be an integer"),
        ({"budget": True}, "budget must be an integer"),
        ({"budget": "10"}, "budget must be an integer"),
        ({"labels": []}, "labels must be an object"),
        ({"labels": {"skil": []}}, "labels: unknown key(s) 'skil'"),
        ({"labels": {"skill": "reasoning"}}, "labels.skill must be a list of strings"),
        ({"labels": {"skill": [1]}}, "labels.skill must be a list of strings"),
        (
            {"labels": {"skill": ["x"] * (MAX_LIST + 1)}},
            f"labels.skill has {MAX_LIST + 1} entries; at most {MAX_LIST}",
        ),
        ({"labels": {"skill": ["wisdom"]}}, "labels.skill: 'wisdom' not one of knowledge"),
        ({"labels": {"format": ["essay"]}}, "labels.format: 'essay' not one of binary"),
        ({"labels": {"subject": ["Science"]}}, "labels.subject: 'Science' is not a subject"),
        ({"labels": {"subject": ["science/"]}}, "is not a subject such as 'science/math'"),
        ({"labels": {"subject": ["alchemy/gold"]}}, "'alchemy/gold' does not start with one of"),
        ({"labels": {"target": ["kr"]}}, "labels.target: 'kr' is not 'general' or 'local/"),
        ({"labels": {"target": ["local/kor"]}}, "is not 'general' or 'local/<country code>'"),
        ({"labels": {"language": ["kor"]}}, "labels.language: 'kor' is not an ISO 639-1"),
        ({"labels": {"language": ["ko\n"]}}, "labels.language: 'ko\\n' is not an ISO 639-1"),
        ({"pillars": ["speed"]}, "pillars: 'speed' not one of reasoning"),
        ({"benchmarks": ["GSM8K"]}, "benchmarks: 'GSM8K' is not a benchmark name"),
        ({"benchmarks": ["gsm8k\n"]}, "is not a benchmark name"),
        ({"models": []}, "models must be an object"),
        ({"models": {"size": 1}}, "models: unknown key(s) 'size'"),
        ({"models": {"select": "best"}}, "models.select must be one of ranked, filter, named"),
        ({"models": {"select": "named"}}, "models.select 'named' needs at least one name"),
        ({"models": {"names": ["a"]}}, "models.names is only read when models.select is 'named'"),
        ({"models": {"kinds": ["hf"]}}, "models.kinds, min_params and max_params need"),
        ({"models": {"max_params": 5}}, "need models.select 'filter'"),
        ({"models": {"select": "named", "names": [" bad"]}}, "is not a model name or ref"),
        ({"models": {"select": "filter", "kinds": ["onnx"]}}, "models.kinds: 'onnx' not one of"),
        ({"models": {"select": "filter", "min_params": -1}}, "models.min_params must be a non"),
        ({"models": {"select": "filter", "max_params": True}}, "models.max_params must be a non"),
        ({"models": {"select": "filter", "max_params": 1.5}}, "models.max_params must be a non"),
        (
            {"models": {"select": "filter", "min_params": 9, "max_params": 8}},
            "models.min_params is above models.max_params",
        ),
        ({"endpoints": {}}, "endpoints must be a list"),
        (
            {"endpoints": [{"url": f"https://h{i}", "model": "m"} for i in range(4)]},
            f"at most {MAX_ENDPOINTS} endpoints per plan",
        ),
        ({"endpoints": ["https://h"]}, "endpoints[0] must be an object with url and model"),
        (_endpoint(url="https://h", model="m", api_key="k"), "endpoints[0]: unknown key(s)"),
        (_endpoint(model="m"), "endpoints[0].url must be an http(s) URL without credentials"),
        (_endpoint(url="ftp://h/x", model="m"), "endpoints[0].url must be an http(s) URL"),
        (_endpoint(url="https://u:secret@h/v1", model="m"), "URL without credentials"),
        (_endpoint(url="https://u@h/v1", model="m"), "URL without credentials"),
        (_endpoint(url="https://", model="m"), "URL without credentials"),
        (_endpoint(url="https://h /v1", model="m"), "URL without credentials"),
        (_endpoint(url="https://[::1/v1", model="m"), "URL without credentials"),
        (_endpoint(url="https://h/" + "x" * 2000, model="m"), "URL without credentials"),
        (_endpoint(url="https://h", model=""), "endpoints[0].model must be a model name"),
        (_endpoint(url="https://h", model="m" * 201), "model name of 1 to 200 characters"),
        (_endpoint(url="https://h", model="a\nb"), "model name of 1 to 200 characters"),
        (_endpoint(url="https://h", model=7), "model name of 1 to 200 characters"),
        (
            {"endpoints": [{"url": "https://h", "model": "m"}, {"url": "https://h", "model": "m"}]},
            "endpoints lists the same endpoint twice",
        ),
        ({"versions": []}, "versions must be an object"),
        ({"versions": {"prompt": 1}}, "versions: unknown key(s) 'prompt'"),
        ({"versions": {"taxonomy": 2}}, "versions.taxonomy 2: this server knows taxonomy 1"),
        ({"versions": {"taxonomy": True}}, "versions.taxonomy True"),
        ({"versions": {"taxonomy": 1.0}}, "versions.taxonomy 1.0"),
        ({"versions": {"planner": 1}}, "versions.planner must be a short string"),
        ({"versions": {"planner": "x" * 65}}, "versions.planner must be a short string"),
        ({"versions": {"benchmarks": []}}, "versions.benchmarks must map benchmark names"),
        ({"versions": {"benchmarks": {"Bad": 1}}}, "versions.benchmarks must map"),
        ({"versions": {"benchmarks": {"gsm8k": 0}}}, "versions.benchmarks must map"),
        ({"versions": {"benchmarks": {"gsm8k": True}}}, "versions.benchmarks must map"),
        ({"versions": {"benchmarks": {"gsm8k": "3"}}}, "versions.benchmarks must map"),
        ({"versions": {"benchmarks": {1: 1}}}, "versions.benchmarks must map"),
        ({"versions": {"seed": "ABC"}}, "versions.seed must be 1 to 64 lowercase hex digits"),
        ({"versions": {"seed": "ab\n"}}, "versions.seed must be 1 to 64 lowercase hex digits"),
        ({"versions": {"seed": ""}}, "versions.seed must be 1 to 64"),
        ({"versions": {"seed": "a" * 65}}, "versions.seed must be 1 to 64"),
        ({"versions": {"seed": 12}}, "versions.seed must be 1 to 64"),
    ],
)
def test_invalid_plans_say_what_is_wrong(doc, message):
    with pytest.raises(PlanError) as info:
        parse_plan(doc)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "url",
    ["http://h", "https://h.example:8443/v1", "https://10.0.0.1/v1?x=1", "https://[::1]:8/v1"],
)
def test_plain_urls_are_accepted(url):
    assert parse_plan(_endpoint(url=url, model="m")).endpoints[0].url == url


def test_named_models_and_open_bounds():
    plan = parse_plan({"models": {"select": "named", "names": ["hf/b", "gguf/./a.gguf", "hf/b"]}})
    assert plan.models.names == ("gguf/./a.gguf", "hf/b")
    plan = parse_plan({"models": {"select": "filter", "min_params": 0, "max_params": None}})
    assert (plan.models.min_params, plan.models.max_params) == (0, None)


def test_every_top_level_field_is_checked_in_place():
    assert parse_plan(_with(("labels", "skill"), ["value"])).label_values("skill") == ("value",)
    with pytest.raises(PlanError, match="versions.seed"):
        parse_plan(_with(("versions", "seed"), "xyz"))


def test_plan_built_in_code_has_the_same_json_shape():
    plan = Plan(labels={"skill": ("reasoning",)}, pillars=("math",))
    assert parse_plan(plan.as_json()).as_json() == {
        **plan.as_json(),
        "versions": {"taxonomy": TAXONOMY_VERSION},
    }
