"""Reading a query: tokens with their place in the text, one normal form for lookups,
and the words that carry no label (stop words, in English and Korean).

A token is a run of letters and digits (``gsm8k``, ``7b``, ``1.5b``, ``c++``, ``한국어로``);
hyphens, underscores, slashes and punctuation separate tokens, so ``high-school`` and
``high school`` read alike. The normal form is NFKC, case-folded. Korean particles and
endings (``을``, ``에서``, ``하는`` …) and English inflections (``-s``, ``-ing``, ``-ed``)
are stripped only when what is left is a word the lexicon or the stop words know: a
word is never cut into something new.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass

_TOKEN = re.compile(r"\d+(?:\.\d+)?[^\W_]*|[^\W\d_][^\W_]*(?:\+\+|#)?")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")

KO_SUFFIXES = tuple(
    sorted(
        {
            # particles
            "에서는",
            "에서도",
            "에게서",
            "으로는",
            "으로서",
            "으로써",
            "이라는",
            "에서의",
            "에서",
            "에게",
            "한테",
            "으로",
            "까지",
            "부터",
            "보다",
            "처럼",
            "만큼",
            "이나",
            "이랑",
            "라는",
            "에는",
            "에도",
            "은",
            "는",
            "이",
            "가",
            "을",
            "를",
            "에",
            "의",
            "로",
            "와",
            "과",
            "도",
            "만",
            "나",
            "랑",
            "요",
            "용",
            # endings of verbs and adjectives made from nouns
            "하면서도",
            "하면서",
            "하지만",
            "하는데",
            "하는",
            "하고",
            "하지",
            "하게",
            "하며",
            "하면",
            "하여",
            "해서",
            "했던",
            "합니다",
            "하다",
            "한",
            "할",
            "해",
            "되는",
            "된",
            "적인",
            "적으로",
            "적",
            "스러운",
            "있는",
            "없는",
            "지",
            "면서도",
            "면서",
            "인",
            "이는",
            "인가요",
            "일까",
            "된다",
        },
        key=len,
        reverse=True,
    )
)
"""Korean particles and endings the reader strips (longest first)."""

_EN_SUFFIXES = (("'s", ""), ("ies", "y"), ("es", ""), ("s", ""), ("ing", ""), ("ing", "e"),
                ("ed", ""), ("ed", "e"), ("ly", ""))  # fmt: skip


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


EN_STOP = _words(
    """a an the of for to in on at by with without from about into over under than then and
    or but not no nor is are was were be being been am do does did doing done have has had
    having can could should would will shall may might must which what who whom whose when
    where why how that this these those there here it its they them their i me my we our
    us you your he she his her as if so such very too also just only any some all most more
    less each every other others both either neither one ones way ways s t
    model models llm llms lm lms problem problems best better good great top
    strongest strong strongly well rank ranks ranked ranking rankings leaderboard
    leaderboards board compare comparison versus vs benchmark benchmarks score scores
    scoring performance perform performs performing evaluate evaluated evaluation eval
    evals test tests testing question questions answer answers answering task tasks
    request requests prompt prompts recommend recommendation show find give list want
    need needs looking look use used using run running please tell help me like good at
    while still without useful accurate accuracy work works working handle handles
    handling solve solves solving do does get gets make makes most least know knows
    knowing against sort kind type types"""
)
"""English words that carry no label: function words and the words every query has
(``best``, ``model``, ``leaderboard``)."""

KO_STOP = _words(
    """가장 제일 좋은 좋 최고 최고의 모델 모델들 언어모델 어떤 어느 무엇 뭐 뭔가요
    무엇인가요 추천 추천해 추천해줘 추천해주세요 알려줘 알려주세요 잘 잘하는 잘하 하는 위한
    위해 대한 대해 및 그리고 또는 순위 비교 랭킹 리더보드 것 수 있는 있 없 없는 없이 않은
    않는 않으면서 않고 않 되는 된 문제 질문 답 답변 평가 성능 점수 벤치마크 요청 뛰어난 강한
    높은 찾아줘 보여줘 중 중에서 누가 나은 더 뭘까 이 그 저 모든 어떻게 정말 하고 하면서도
    하면서 쓸 때 데 뭐가 좀 싶어 싶은 푸는 풀 풀이 적은 많은 능력 풍부한 관련 관련된 속지
    답하는 답하 다루는 대해서 모두 둘 다"""
)
"""Korean words that carry no label (after particles are stripped)."""


@dataclass(frozen=True)
class Token:
    text: str
    """As written in the query."""
    norm: str
    """NFKC, case-folded."""
    start: int
    end: int


def normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokens(query: str) -> list[Token]:
    """The query's tokens, in order, with their spans."""
    return [Token(m.group(), normal(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(query)]


def key_of(phrase: str) -> str:
    """A lexicon phrase as its lookup key: normal tokens joined by one space."""
    return " ".join(t.norm for t in tokens(phrase))


def has_hangul(word: str) -> bool:
    return bool(_HANGUL.search(word))


def strip_ko(word: str, known: Collection[str], depth: int = 3) -> str | None:
    """``word`` without Korean particles/endings, when what is left is ``known``."""
    frontier = [word]
    for _ in range(depth):
        nxt = []
        for w in frontier:
            for suffix in KO_SUFFIXES:
                if w.endswith(suffix) and len(w) > len(suffix):
                    rest = w[: -len(suffix)]
                    if rest in known:
                        return rest
                    nxt.append(rest)
        frontier = nxt
    return None


def only_suffixes(rest: str) -> bool:
    """Whether ``rest`` is nothing but Korean particles and endings (or empty)."""
    if not rest:
        return True
    return any(rest.startswith(s) and only_suffixes(rest[len(s) :]) for s in KO_SUFFIXES)


def stem(word: str, known: Collection[str]) -> str:
    """The form of ``word`` to look up: itself if ``known``, else without a Korean
    particle/ending or an English inflection when that is ``known``; else itself."""
    if word in known:
        return word
    if has_hangul(word):
        return strip_ko(word, known) or word
    for suffix, repl in _EN_SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            base = word[: -len(suffix)] + repl
            if base in known:
                return base
    return word


def is_stop(word: str) -> bool:
    return word in EN_STOP or word in KO_STOP
