"""The offline planner: a table of queries in English and Korean (and mixed and
misspelled ones) with the label filters each must give, and what it must not guess."""

from __future__ import annotations

import pytest

from quorumbench.benchmarks import DEFAULT_PILLARS
from quorumbench.core.plans import DEFAULT_BUDGET
from quorumbench.planner import CatalogEntry, plan_query
from quorumbench.planner.offline import OFFLINE_PLANNER

CATALOG = [
    CatalogEntry(name, i + 1, pillar) for i, (name, pillar) in enumerate(DEFAULT_PILLARS.items())
]
B = 1_000_000_000
SMALL = {"max_params": 4 * B}


def summary(report):
    """The plan's filters that are set, as one flat dict."""
    doc = report.plan.as_json()
    out = {k: v for k, v in doc["labels"].items() if v}
    if doc["pillars"]:
        out["pillars"] = doc["pillars"]
    if doc["benchmarks"]:
        out["benchmarks"] = doc["benchmarks"]
    models = {k: v for k, v in doc["models"].items() if k != "select" and v not in (None, [])}
    if models:
        out["models"] = models
    return out


SAFETY = {"skill": ["alignment"], "subject": ["social-intelligence/safety"], "pillars": ["safety"]}

TABLE = [
    # English
    (
        "best small model for Korean high-school math",
        {"subject": ["science/math"], "language": ["ko"], "models": SMALL},
        ["high-school"],
    ),
    ("which models refuse unsafe requests without being useless?", SAFETY, []),
    (
        "best model for multiple-choice science questions",
        {"subject": ["science"], "format": ["mcqa"]},
        [],
    ),
    (
        "tiny models under 1B that are good at arithmetic",
        {"subject": ["science/math"], "models": {"max_params": B}},
        [],
    ),
    (
        "which 7B model is best at coding?",
        {
            "subject": ["tech/coding"],
            "models": {"min_params": 56 * B // 10, "max_params": 84 * B // 10},
        },
        [],
    ),
    (
        "Korean culture and history knowledge",
        {"skill": ["knowledge"], "subject": ["culture", "hass/history"], "target": ["local/kr"]},
        [],
    ),
    ("models that know about Korea", {"target": ["local/kr"]}, []),
    ("best model for gsm8k", {"benchmarks": ["gsm8k"]}, []),
    ("how do models do on TruthfulQA?", {"benchmarks": ["truthfulqa-mc1", "truthfulqa-mc2"]}, []),
    (
        "open-ended reasoning in English",
        {"skill": ["reasoning"], "format": ["open-ended"], "language": ["en"]},
        [],
    ),
    (
        "yes/no reading comprehension",
        {"subject": ["hass/reading-comprehension"], "format": ["binary"]},
        [],
    ),
    ("quantized GGUF models for Japanese", {"language": ["ja"], "models": {"kinds": ["gguf"]}}, []),
    (
        "LoRA adapters on MMLU law questions",
        {"subject": ["hass/law"], "benchmarks": ["mmlu"], "models": {"kinds": ["lora"]}},
        [],
    ),
    (
        "commonsense reasoning with physical commonsense",
        {"subject": ["science/physical-commonsense", "social-intelligence/commonsense"]},
        [],
    ),
    (
        "which models are least biased against stereotypes?",
        {"subject": ["social-intelligence/bias", "social-intelligence/stereotypes"]},
        [],
    ),
    (
        "safety pillar ranking for models of at least 13B parameters",
        {"pillars": ["safety"], "models": {"min_params": 13 * B}},
        [],
    ),
    (
        "medical and biology knowledge",
        {"skill": ["knowledge"], "subject": ["science/biology", "science/medicine"]},
        [],
    ),
    ("logic puzzles and syllogisms", {"subject": ["science/logic"]}, ["puzzles"]),
    (
        "large models for machine learning and computer science",
        {
            "subject": ["tech/computer-science", "tech/machine-learning"],
            "models": {"min_params": 15 * B},
        },
        [],
    ),
    ("jailbreak resistance", {"pillars": ["safety"]}, ["resistance"]),
    ("grammar and linguistics", {"subject": ["hass/linguistics"]}, []),
    ("misinformation and conspiracy theories", {"subject": ["hass/misinformation"]}, []),
    ("best model for Chinese poetry", {"language": ["zh"]}, ["poetry"]),
    ("models good at economics and finance", {"subject": ["hass/economics"]}, []),
    ("a multilingual model for translation", {}, ["multilingual", "translation"]),
    (
        "model that doesn't hallucinate facts",
        {"skill": ["knowledge"], "benchmarks": ["truthfulqa-mc1", "truthfulqa-mc2"]},
        [],
    ),
    # Korean
    (
        "한국 고등학교 수학에 가장 좋은 작은 모델",
        {"subject": ["science/math"], "target": ["local/kr"], "models": SMALL},
        ["고등학교"],
    ),
    ("위험한 요청을 거절하면서도 쓸모없지 않은 모델은?", SAFETY, []),
    (
        "한국어 객관식 과학 문제를 잘 푸는 모델",
        {"subject": ["science"], "format": ["mcqa"], "language": ["ko"]},
        [],
    ),
    (
        "1B 이하의 초소형 모델 중 산수를 잘하는 모델",
        {"subject": ["science/math"], "models": {"max_params": B}},
        [],
    ),
    (
        "코딩을 가장 잘하는 7B 모델은?",
        {
            "subject": ["tech/coding"],
            "models": {"min_params": 56 * B // 10, "max_params": 84 * B // 10},
        },
        [],
    ),
    (
        "한국사와 한국 문화 지식",
        {"skill": ["knowledge"], "subject": ["culture", "hass/history"], "target": ["local/kr"]},
        [],
    ),
    (
        "편향과 고정관념이 적은 모델",
        {"subject": ["social-intelligence/bias", "social-intelligence/stereotypes"]},
        [],
    ),
    (
        "70억 파라미터 이상 대형 모델의 안전성 순위",
        {"pillars": ["safety"], "models": {"min_params": 15 * B}},
        [],
    ),
    ("영어 독해 능력", {"subject": ["hass/reading-comprehension"], "language": ["en"]}, []),
    ("양자화된 모델로 일본어 평가", {"language": ["ja"], "models": {"kinds": ["gguf"]}}, []),
    (
        "의학과 생물학 지식이 풍부한 모델",
        {"skill": ["knowledge"], "subject": ["science/biology", "science/medicine"]},
        [],
    ),
    ("논리적 추론을 잘하는 모델", {"skill": ["reasoning"], "subject": ["science/logic"]}, []),
    ("머신러닝과 컴퓨터 과학", {"subject": ["tech/computer-science", "tech/machine-learning"]}, []),
    ("법률 관련 주관식 질문", {"subject": ["hass/law"], "format": ["open-ended"]}, []),
    ("gsm8k에서 가장 좋은 모델", {"benchmarks": ["gsm8k"]}, []),
    ("MMLU 법학 문제", {"subject": ["hass/law"], "benchmarks": ["mmlu"]}, []),
    ("상식 추론 능력이 좋은 모델", {"subject": ["social-intelligence/commonsense"]}, []),
    ("허위 정보와 음모론에 속지 않는 모델", {"subject": ["hass/misinformation"]}, []),
    ("윤리와 철학 질문에 답하는 모델", {"subject": ["hass/ethics", "hass/philosophy"]}, []),
    ("경제와 금융 지식", {"skill": ["knowledge"], "subject": ["hass/economics"]}, []),
    ("시와 번역을 잘하는 모델", {}, ["시와 번역을"]),
    ("수능 수학 문제를 잘 푸는 모델", {"subject": ["science/math"], "target": ["local/kr"]}, []),
    ("환각이 적은 모델", {"benchmarks": ["truthfulqa-mc1", "truthfulqa-mc2"]}, []),
    # mixed
    (
        "작은 모델 for 한국어 math",
        {"subject": ["science/math"], "language": ["ko"], "models": SMALL},
        [],
    ),
    (
        "best model for 한국사 multiple choice",
        {"subject": ["hass/history"], "target": ["local/kr"], "format": ["mcqa"]},
        [],
    ),
    (
        "GSM8K 수학 small models",
        {"subject": ["science/math"], "benchmarks": ["gsm8k"], "models": SMALL},
        [],
    ),
    ("한국어수학 잘하는 모델", {"subject": ["science/math"], "language": ["ko"]}, []),
    # misspelled
    ("best smal model for mathematcs", {"subject": ["science/math"]}, ["smal"]),
    (
        "wich models refuse unsfe requests?",
        {"skill": ["alignment"], "pillars": ["safety"]},
        ["wich"],
    ),
    ("multiple choise questions in koreen", {"format": ["mcqa"], "language": ["ko"]}, []),
    ("reasonning and knowlege benchmarks", {"skill": ["knowledge", "reasoning"]}, []),
    ("Koren histroy", {"subject": ["hass/history"], "target": ["local/kr"]}, []),
    ("the safty of small modles", {"pillars": ["safety"], "models": SMALL}, []),
    ("hihg school mathematics", {"subject": ["science/math"]}, ["hihg school"]),
]


def test_the_table_is_large_and_bilingual():
    assert len(TABLE) >= 40
    assert sum(any("\uac00" <= c <= "\ud7a3" for c in q) for q, _, _ in TABLE) >= 15


@pytest.mark.parametrize(("query", "expected", "unmapped"), TABLE, ids=[q for q, _, _ in TABLE])
def test_query_gives_the_expected_filters(query, expected, unmapped):
    report = plan_query(query, CATALOG)
    assert summary(report) == expected
    assert list(report.unmapped) == unmapped
    assert report.planner == OFFLINE_PLANNER
    assert report.fallback is None
    assert report.query == query
    for match in report.matches:  # every match quotes the query
        assert match.text in query
        assert 0 < match.confidence <= 1


@pytest.mark.parametrize(
    "query", ["which is the best model?", "가장 좋은 모델은 무엇인가요?", "", "?!"]
)
def test_filler_only_queries_map_nothing_and_list_nothing(query):
    report = plan_query(query, CATALOG)
    assert summary(report) == {}
    assert report.matches == report.unmapped == ()
    assert report.plan.models.select == "ranked"


def test_unknown_words_are_reported_not_guessed():
    report = plan_query("best model for quantum poetry and origami", CATALOG)
    assert summary(report) == {}
    assert report.unmapped == ("quantum poetry", "origami")


def test_same_query_same_plan_and_report():
    first = plan_query("best small model for Korean high-school math", CATALOG)
    again = plan_query("best small model for Korean high-school math", CATALOG)
    assert again == first
    assert again.plan.id == first.plan.id
    other = plan_query("best small model for Korean high-school physics", CATALOG)
    assert other.plan.id != first.plan.id


def test_matches_say_how_and_quote_the_query():
    report = plan_query("위험한 요청을 거절하는 multiple-choise tiny 모델", CATALOG)
    got = [(m.text, m.key, m.value, m.how) for m in report.matches]
    assert got == [
        ("위험한 요청을", "pillar", "safety", "lexicon"),
        ("위험한 요청을", "subject", "social-intelligence/safety", "lexicon"),
        ("거절하는", "skill", "alignment", "lexicon"),
        ("multiple-choise", "format", "mcqa", "fuzzy"),
        ("tiny", "models", f"max_params:{B}", "lexicon"),
    ]
    fuzzy = [m.confidence for m in report.matches if m.how == "fuzzy"]
    assert fuzzy == [0.93]
    assert all(m.confidence == 1.0 for m in report.matches if m.how == "lexicon")


def test_short_words_are_never_matched_fuzzily():
    # 'save' is one letter from 'safe' but is not about safety
    report = plan_query("models that save memory", CATALOG)
    assert summary(report) == {}
    assert report.unmapped == ("save memory",)


def test_language_of_the_query_is_reported_not_used_as_a_filter():
    korean = plan_query("가장 좋은 수학 모델은 무엇인가요?", CATALOG)
    assert korean.language == "ko"
    assert summary(korean) == {"subject": ["science/math"]}
    english = plan_query("which models refuse unsafe requests without being useless?", CATALOG)
    assert english.language == "en"
    assert plan_query("gsm8k", CATALOG).language is None  # too short to tell


def test_versions_name_the_planner_taxonomy_and_covered_benchmarks():
    report = plan_query("math pillar", CATALOG)
    versions = report.plan.versions
    assert versions["planner"] == OFFLINE_PLANNER
    assert versions["taxonomy"] == 1
    math = {e.name: e.version for e in CATALOG if e.pillar == "math"}
    assert versions["benchmarks"] == math and set(math) == {"arith", "gsm8k"}
    everything = plan_query("best model", CATALOG).plan.versions["benchmarks"]
    assert everything == {e.name: e.version for e in CATALOG}
    named = plan_query("mmlu and boolq", CATALOG).plan.versions["benchmarks"]
    assert set(named) == {"mmlu", "boolq"}


def test_seed_is_given_or_derived_from_the_plan():
    derived = plan_query("math", CATALOG).plan.versions["seed"]
    assert len(derived) == 16 and int(derived, 16) >= 0
    assert plan_query("maths", CATALOG).plan.versions["seed"] == derived  # same plan
    assert plan_query("physics", CATALOG).plan.versions["seed"] != derived
    given = plan_query("math", CATALOG, seed="abc123").plan
    assert given.versions["seed"] == "abc123"


def test_budget_is_kept_and_checked():
    assert plan_query("math", CATALOG).plan.budget == DEFAULT_BUDGET
    assert plan_query("math", CATALOG, budget=40).plan.budget == 40
    with pytest.raises(ValueError, match="budget must be an integer"):
        plan_query("math", CATALOG, budget=0)
    with pytest.raises(ValueError, match="versions.seed"):
        plan_query("math", CATALOG, seed="not hex")


def test_benchmarks_follow_the_catalog():
    small = [CatalogEntry("mmlu", 2, "reasoning"), CatalogEntry("my-bench", 1, None)]
    report = plan_query("gsm8k or my bench or mmlu", small)
    assert report.plan.benchmarks == ("mmlu", "my-bench")
    assert report.unmapped == ("gsm8k",)  # a built-in name this server does not run
    assert report.plan.versions["benchmarks"] == {"mmlu": 2, "my-bench": 1}
    assert plan_query("my-bench", small).plan.benchmarks == ("my-bench",)


def test_contradicting_sizes_keep_the_last_one():
    report = plan_query("under 1B but at least 7B", CATALOG)
    assert summary(report)["models"] == {"min_params": 7 * B}
    both = plan_query("small models of at least 1B", CATALOG)
    assert summary(both)["models"] == {"min_params": B, "max_params": 4 * B}


@pytest.mark.parametrize(
    ("query", "expected", "unmapped"),
    [
        ("가장좋은모델", {}, []),  # filler written together
        ("수학고등학교 모델", {"subject": ["science/math"]}, ["수학고등학교"]),
        ("고등학교수학", {}, ["고등학교수학"]),  # cut only from the start
        ("origami, math and origami", {"subject": ["science/math"]}, ["origami"]),
    ],
)
def test_korean_compounds_and_repeated_words(query, expected, unmapped):
    report = plan_query(query, CATALOG)
    assert summary(report) == expected
    assert list(report.unmapped) == unmapped


def test_a_misspelled_benchmark_this_server_does_not_run_is_unmapped():
    catalog = [CatalogEntry("mmlu", 1, "reasoning")]
    assert plan_query("hellaswg", catalog).unmapped == ("hellaswg",)
    assert plan_query("hellaswg", CATALOG).plan.benchmarks == ("hellaswag",)


def test_a_size_between_words_separates_them():
    report = plan_query("korean 7B culture and quantum 1B poetry", CATALOG)
    got = summary(report)
    assert (got["language"], got["subject"]) == (["ko"], ["culture"])
    assert "target" not in got  # not the phrase 'korean culture'
    assert report.unmapped == ("quantum", "poetry")
