"""The offline planner's synonym lexicon: words and phrases, in English and Korean,
for every label value of taxonomy v1, the five pillars, the built-in benchmarks and
the model-size and model-type words.

A phrase is written as a person types it; :func:`quorumbench.planner.text.key_of`
turns it into the lookup key (lowercase, NFKC, hyphens and underscores as spaces,
Korean particles and endings stripped), the same way the query is read. A phrase maps
to one or more *senses* ``(key, value)``; one phrase with two senses (``"korean
culture"``: target ``local/kr`` and subject ``culture``) narrows the plan on both.

Rules the entries follow (docs: ``planner.md``):

* a language name sets ``language`` (English ``Korean``, Korean ``한국어``); a country
  name sets ``target`` (``Korea``, ``한국``, ``미국``). English uses one word for the
  Korean language and Korean things; the planner reads it as the language;
* ``math``, ``coding``, ``reasoning`` set the per-sample label (subject or skill), which
  reaches every benchmark that has such samples; a pillar is set by its safety words,
  by ``language skills`` and by ``<pillar> pillar``;
* size words set ``models`` bounds (:data:`SIZE_WORDS`); numbers with units are read
  by :mod:`quorumbench.planner.sizes`.
"""

from __future__ import annotations

from dataclasses import dataclass

Sense = tuple[str, str]
"""``(key, value)``: a label key, ``pillar``, ``benchmark`` or ``models``."""


@dataclass(frozen=True)
class Words:
    """The phrases of one meaning, in English and in Korean."""

    en: tuple[str, ...]
    ko: tuple[str, ...] = ()


def _w(en: str, ko: str = "") -> Words:
    """``Words`` from ``|``-separated phrases (compact tables below)."""
    return Words(tuple(p for p in en.split("|") if p), tuple(p for p in ko.split("|") if p))


SKILL_WORDS: dict[str, Words] = {
    "knowledge": _w(
        "knowledge|knowledgeable|factual|facts|factual knowledge|general knowledge|world knowledge",
        "지식|사실|배경지식|일반 지식",
    ),
    "reasoning": _w(
        "reasoning|thinking|problem solving|inference|deduction|critical thinking",
        "추론|사고력|문제 해결|사고|추리",
    ),
    "value": _w(
        "values|value|fairness|fair|unbiased|social values|value alignment",
        "가치|가치관|공정성|공정",
    ),
    "alignment": _w(
        "alignment|aligned|refuse|refusal|refusals|refusing|over refusal|helpful|"
        "helpfulness|useless|unhelpful|harmless|harmlessness|instruction following|"
        "follow instructions|obedient",
        "정렬|거절|거부|유용성|유용|쓸모없|쓸모 없|도움|무해|지시 따르기|지시 이행",
    ),
}

SUBJECT_WORDS: dict[str, Words] = {
    "science": _w("science|sciences|scientific|stem|natural sciences", "과학|자연과학|이공계"),
    "tech": _w("tech|technology|technical|computing", "기술|공학 기술|정보기술|아이티"),
    "hass": _w(
        "humanities|social sciences|social science|humanities and social sciences|hass",
        "인문|인문학|사회과학|인문사회",
    ),
    "culture": _w("culture|cultural|pop culture", "문화|대중문화"),
    "social-intelligence": _w(
        "social intelligence|social skills|social reasoning|theory of mind",
        "사회성|사회적 지능|사회 지능|마음 이론",
    ),
    "art-sports": _w(
        "art|arts|sports|sport|art and sports|music|athletics", "예술|스포츠|체육|미술|음악"
    ),
    "science/math": _w(
        "math|maths|mathematics|mathematical|arithmetic|algebra|geometry|calculus|"
        "statistics|probability|word problems|math word problems",
        "수학|산수|대수|기하|미적분|통계|확률|연산|사칙연산",
    ),
    "science/medicine": _w(
        "medicine|medical|clinical|anatomy|virology|genetics|doctor", "의학|의료|해부학|임상|유전학"
    ),
    "science/astronomy": _w("astronomy|space|astrophysics", "천문학|천문|우주"),
    "science/biology": _w("biology|biological|life science", "생물|생물학|생명과학"),
    "science/chemistry": _w("chemistry|chemical", "화학"),
    "science/physics": _w("physics|physical science", "물리|물리학"),
    "science/logic": _w(
        "logic|logical|formal logic|syllogism|syllogisms|logical fallacies|fallacies",
        "논리|논리학|삼단논법|오류 추론",
    ),
    "science/psychology": _w("psychology|psychological", "심리학|심리"),
    "science/health": _w("health|nutrition|healthcare|diet", "건강|영양|보건"),
    "science/general": _w(
        "general science|basic science|grade school science", "일반 과학|기초 과학"
    ),
    "science/physical-commonsense": _w(
        "physical commonsense|physical common sense|physical reasoning|intuitive physics",
        "물리적 상식|물리 상식|물리적 추론",
    ),
    "science/misconceptions": _w(
        "misconceptions|misconception|common misconceptions", "오개념|잘못된 통념|통념"
    ),
    "science/weather": _w("weather|climate|meteorology", "날씨|기상|기후"),
    "tech/computer-science": _w(
        "computer science|cs|algorithms|data structures", "컴퓨터 과학|전산학|컴퓨터공학|알고리즘"
    ),
    "tech/security": _w(
        "security|cybersecurity|cyber security|computer security|infosec",
        "보안|사이버 보안|정보보안",
    ),
    "tech/engineering": _w(
        "engineering|electrical engineering|electronics", "공학|전기공학|전자공학"
    ),
    "tech/machine-learning": _w(
        "machine learning|ml|deep learning|ai|artificial intelligence|neural networks",
        "머신러닝|기계학습|딥러닝|인공지능",
    ),
    "tech/coding": _w(
        "coding|programming|python|software|software engineering|programmer|coder",
        "코딩|프로그래밍|개발|소프트웨어|파이썬",
    ),
    "hass/business": _w(
        "business|marketing|management|accounting|public relations",
        "경영|마케팅|회계|비즈니스|홍보",
    ),
    "hass/economics": _w(
        "economics|economy|economic|finance|financial|macroeconomics|microeconomics|"
        "econometrics|advertising",
        "경제|경제학|금융|재무|광고",
    ),
    "hass/history": _w("history|historical|prehistory", "역사|역사학|선사"),
    "hass/geography": _w("geography", "지리|지리학"),
    "hass/politics": _w(
        "politics|political|government|foreign policy|security studies", "정치|정치학|정부|외교"
    ),
    "hass/law": _w("law|legal|jurisprudence|lawyer|laws", "법|법률|법학|판례"),
    "hass/ethics": _w("ethics|ethical|moral|morality|morals", "윤리|도덕|윤리학"),
    "hass/philosophy": _w("philosophy|philosophical", "철학"),
    "hass/sociology": _w("sociology|society|social", "사회학|사회"),
    "hass/religion": _w("religion|religions|religious|world religions", "종교"),
    "hass/reading-comprehension": _w(
        "reading comprehension|reading|comprehension|passages", "독해|읽기|독해력|지문"
    ),
    "hass/linguistics": _w(
        "linguistics|linguistic|grammar|syntax|subject verb agreement", "언어학|문법|구문"
    ),
    "hass/misinformation": _w(
        "misinformation|disinformation|conspiracies|conspiracy|conspiracy theories|fake news",
        "허위 정보|허위정보|가짜 뉴스|음모론|가짜뉴스",
    ),
    "hass/education": _w("education|educational|teaching", "교육"),
    "hass/language": _w("etymology|idioms|language facts|word origins", "어원|관용어|언어 상식"),
    "culture/trivia": _w("trivia|global facts|quiz|miscellaneous", "잡학|퀴즈|상식 퀴즈"),
    "culture/people": _w("famous people|celebrities|public figures", "인물|유명인|위인"),
    "culture/geography": _w("places|landmarks|cities|countries", "장소|명소|도시|나라"),
    "culture/quotations": _w(
        "quotes|quotations|quotation|misquotations|sayings", "인용|명언|인용구"
    ),
    "culture/folklore": _w(
        "folklore|myths|myth|proverbs|superstitions|superstition|fairy tales|fairytales|"
        "paranormal|legends",
        "민속|속담|미신|신화|설화|전설|동화",
    ),
    "culture/daily-life": _w(
        "daily life|everyday life|everyday|everyday situations|daily activities",
        "일상|일상생활|생활",
    ),
    "culture/other": _w("other culture|miscellaneous culture", "기타 문화"),
    "social-intelligence/commonsense": _w(
        "commonsense|common sense|commonsense reasoning", "상식|상식 추론"
    ),
    "social-intelligence/bias": _w(
        "bias|biases|biased|prejudice|discrimination", "편향|편견|차별|편향성"
    ),
    "social-intelligence/safety": _w(
        "safety behaviour|safety behavior|safe behaviour", "안전 행동"
    ),
    "social-intelligence/stereotypes": _w(
        "stereotypes|stereotype|stereotyping|stereotypical", "고정관념|스테레오타입"
    ),
    "social-intelligence/self-knowledge": _w(
        "self knowledge|self awareness|self aware|indexical", "자기 인식|자기인식|자기 지식"
    ),
    "social-intelligence/opinion": _w(
        "opinion|opinions|subjective|subjective questions", "의견|주관적|주관|견해"
    ),
    "art-sports/fiction": _w(
        "fiction|novels|novel|literature|stories|fictional", "소설|픽션|문학|이야기"
    ),
}

FORMAT_WORDS: dict[str, Words] = {
    "binary": _w(
        "binary|yes no|yes or no|true false|true or false|boolean", "예 아니오|참 거짓|ox|이진"
    ),
    "mcqa": _w(
        "multiple choice|multiple choices|multi choice|mcq|mcqa|multiple choice questions|"
        "choose the answer",
        "객관식|선다형|사지선다|오지선다|선택형",
    ),
    "short-form": _w(
        "short answer|short answers|short form|exact answer|fill in the blank",
        "단답형|단답|빈칸 채우기|주관식 단답",
    ),
    "open-ended": _w(
        "open ended|open form|free form|free text|essay|long form|long answers|generation|"
        "free response",
        "서술형|자유 응답|논술|주관식|장문",
    ),
    "code": _w(
        "code|code generation|writing code|write code|program synthesis", "코드|코드 생성|코드 작성"
    ),
}

TARGET_WORDS: dict[str, Words] = {
    "general": _w("general|global|universal|international|worldwide", "일반|보편|국제|글로벌"),
    "local/kr": _w(
        "korea|south korea|korea specific|korean specific|republic of korea|csat|suneung",
        "한국|대한민국|국내|남한|우리나라|수능|대학수학능력시험",
    ),
    "local/us": _w("america|usa|united states|us specific|american", "미국"),
    "local/jp": _w("japan", "일본"),
    "local/cn": _w("china", "중국"),
    "local/gb": _w("uk|united kingdom|britain|great britain|british|england", "영국"),
    "local/fr": _w("france", "프랑스"),
    "local/de": _w("germany", "독일"),
    "local/in": _w("india|indian", "인도"),
    "local/es": _w("spain", "스페인"),
    "local/vn": _w("vietnam", "베트남"),
    "local/tw": _w("taiwan|taiwanese", "대만"),
    "local/ca": _w("canada|canadian", "캐나다"),
}

LANGUAGE_WORDS: dict[str, Words] = {
    "en": _w("english|in english|english language", "영어|영문"),
    "ko": _w("korean|in korean|korean language|hangul|hangeul", "한국어|한글|국어|한국말"),
    "ja": _w("japanese|in japanese|japanese language", "일본어|일어"),
    "zh": _w("chinese|mandarin|in chinese|chinese language", "중국어|중문"),
    "fr": _w("french|in french", "프랑스어|불어"),
    "de": _w("german|in german", "독일어"),
    "es": _w("spanish|in spanish", "스페인어"),
    "it": _w("italian|in italian", "이탈리아어"),
    "pt": _w("portuguese|in portuguese", "포르투갈어"),
    "ru": _w("russian|in russian", "러시아어"),
    "vi": _w("vietnamese|in vietnamese", "베트남어"),
    "ar": _w("arabic|in arabic", "아랍어"),
    "hi": _w("hindi|in hindi", "힌디어"),
    "id": _w("indonesian|in indonesian", "인도네시아어"),
    "th": _w("thai|in thai", "태국어"),
}

PILLAR_WORDS: dict[str, Words] = {
    "reasoning": _w("reasoning pillar|reasoning benchmarks", "추론 영역|추론 벤치마크"),
    "coding": _w("coding pillar|coding benchmarks", "코딩 영역|코딩 벤치마크"),
    "math": _w("math pillar|math benchmarks", "수학 영역|수학 벤치마크"),
    "language": _w(
        "language pillar|language benchmarks|language skills|language understanding|"
        "natural language understanding|nlu|language ability",
        "언어 영역|언어 능력|언어 이해|자연어 이해|언어 벤치마크",
    ),
    "safety": _w(
        "safety|safe|unsafe|harmful|harm|harms|dangerous|danger|jailbreak|jailbreaks|"
        "toxic|toxicity|safety pillar|red teaming",
        "안전|안전성|유해|위험|탈옥|유해성|독성|안전 영역",
    ),
}

_TRUTHFUL = "truthfulness|truthful|hallucination|hallucinations|hallucinate|hallucinates"
_TRUTHFUL_KO = "진실성|환각|할루시네이션"
BENCHMARK_WORDS: dict[str, Words] = {
    "arith": _w("arith|arith benchmark"),
    "gen-language": _w("gen language"),
    "gen-reasoning": _w("gen reasoning"),
    "gen-safety": _w("gen safety"),
    "gsm8k": _w("gsm8k|gsm 8k|grade school math 8k"),
    "humaneval": _w("humaneval|human eval"),
    "mbpp": _w("mbpp"),
    "truthfulqa-mc1": _w(
        "truthfulqa mc1|truthful qa mc1|truthfulqa|truthful qa|" + _TRUTHFUL, _TRUTHFUL_KO
    ),
    "truthfulqa-mc2": _w(
        "truthfulqa mc2|truthful qa mc2|truthfulqa|truthful qa|" + _TRUTHFUL, _TRUTHFUL_KO
    ),
    "arc-challenge": _w("arc challenge|arc|ai2 reasoning challenge"),
    "hellaswag": _w("hellaswag|hella swag"),
    "mmlu": _w("mmlu"),
    "boolq": _w("boolq|bool q"),
    "piqa": _w("piqa"),
    "winogrande": _w("winogrande|wino grande"),
    "bbq": _w("bbq"),
}
"""Built-in benchmarks (``benchmarks/__init__.py``). A name maps only when the server's
catalog has it; a catalog's other benchmarks map by their own names."""

GIGA = 1_000_000_000
SIZE_WORDS: dict[str, Words] = {
    f"max_params:{GIGA}": _w("tiny|very small|micro", "초소형|아주 작은|매우 작은"),
    f"max_params:{4 * GIGA}": _w(
        "small|smaller|lightweight|compact|mini|little", "작은|소형|경량|가벼운"
    ),
    f"min_params:{4 * GIGA}": _w("medium|mid size|mid sized|medium sized", "중형|중간 크기"),
    f"max_params:{15 * GIGA}": _w("medium|mid size|mid sized|medium sized", "중형|중간 크기"),
    f"min_params:{15 * GIGA}": _w("large|big|huge|biggest|largest", "대형|큰|거대"),
}
"""Size words and their bounds: tiny ≤ 1B, small ≤ 4B, medium 4B–15B, large ≥ 15B
parameters (a word with two bounds appears under both)."""

KIND_WORDS: dict[str, Words] = {
    "kind:lora": _w("lora|loras|adapter|adapters|fine tuned adapter", "로라|어댑터"),
    "kind:gguf": _w(
        "gguf|quantized|quantised|llama cpp|llamacpp|ggml", "양자화|양자화된|양자화 모델"
    ),
    "kind:hf": _w("hf|hugging face|huggingface|transformers", "허깅페이스|허깅 페이스"),
    "kind:openai": _w("openai|api models|hosted|api", "api 모델|호스팅"),
}

PHRASES: list[tuple[tuple[Sense, ...], Words]] = [
    (
        (("target", "local/kr"), ("subject", "culture")),
        _w("korean culture|culture of korea", "한국 문화|한국문화|우리 문화"),
    ),
    (
        (("target", "local/kr"), ("subject", "hass/history")),
        _w("korean history|history of korea", "한국사|한국 역사|국사"),
    ),
    (
        (("target", "local/kr"), ("subject", "hass/law")),
        _w("korean law|korean legal", "한국 법|한국법"),
    ),
    (
        (("target", "local/us"), ("subject", "hass/history")),
        _w("us history|american history", "미국사|미국 역사"),
    ),
    (
        (("pillar", "safety"), ("subject", "social-intelligence/safety")),
        _w(
            "unsafe requests|harmful requests|dangerous requests|unsafe prompts|harmful prompts",
            "위험한 요청|유해한 요청|위험 요청|유해 요청",
        ),
    ),
]
"""Phrases with two senses: both apply (within the plan, across labels: both must
match)."""


def entries() -> list[tuple[tuple[Sense, ...], Words]]:
    """Every meaning with its phrases: the tables above as ``(senses, words)``."""
    out: list[tuple[tuple[Sense, ...], Words]] = []
    tables: list[tuple[str, dict[str, Words]]] = [
        ("skill", SKILL_WORDS),
        ("subject", SUBJECT_WORDS),
        ("format", FORMAT_WORDS),
        ("target", TARGET_WORDS),
        ("language", LANGUAGE_WORDS),
        ("pillar", PILLAR_WORDS),
        ("benchmark", BENCHMARK_WORDS),
        ("models", SIZE_WORDS),
        ("models", KIND_WORDS),
    ]
    for key, table in tables:
        out += [(((key, value),), words) for value, words in table.items()]
    return out + PHRASES
