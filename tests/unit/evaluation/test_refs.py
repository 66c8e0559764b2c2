import re

import pytest

from quorumbench.errors import InvalidRefError
from quorumbench.evaluation.refs import ModelRef, engine_for, gguf_adapter_base, parse_ref

SHA = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"hf:HuggingFaceTB/SmolLM2-135M-Instruct@{SHA}",
            ModelRef("hf", "HuggingFaceTB/SmolLM2-135M-Instruct", SHA),
        ),
        ("hf:/models/smol", ModelRef("hf", "/models/smol")),
        (f"hf:./smol@{SHA256}", ModelRef("hf", "./smol", SHA256)),
        ("gguf:/m/model.Q4.gguf", ModelRef("gguf", "/m/model.Q4.gguf")),
        (
            f"gguf:org/repo/model.Q4.gguf@{SHA}",
            ModelRef("gguf", "org/repo", SHA, filename="model.Q4.gguf"),
        ),
        (
            "openai:http://127.0.0.1:8000/v1#smol",
            ModelRef("openai", "http://127.0.0.1:8000/v1", model_name="smol"),
        ),
        ("bundled:smollm2-135m-instruct", ModelRef("bundled", "smollm2-135m-instruct")),
        (
            f"bundled:smollm2-135m-instruct@{'ab' * 32}",
            ModelRef("bundled", "smollm2-135m-instruct", "ab" * 32),
        ),
    ],
)
def test_parse(text, expected):
    ref = parse_ref(text)
    assert ref == expected
    assert parse_ref(ref.canonical()) == ref


def test_upper_case_revision_is_normalised():
    assert parse_ref(f"hf:a/b@{SHA.upper()}").revision == SHA


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("HuggingFaceTB/SmolLM2", "expected one of hf:"),
        ("hf:HuggingFaceTB/SmolLM2", "must be pinned"),
        ("hf:HuggingFaceTB/SmolLM2@main", "branch and tag names move"),
        ("hf:notarepo@" + SHA, "not an owner/name repo id"),
        (f"hf:/local@{SHA}", "64-hex SHA-256"),
        ("gguf:/m/model.bin", ".gguf file"),
        (f"gguf:org/repo/model.bin@{SHA}", "expected gguf:"),
        ("openai:http://host/v1", "openai:<base url>#<model name>"),
        ("openai:ftp://host/v1#m", "not an http(s) URL"),
        ("openai:https://user:secret@host/v1#m", "QB_OPENAI_API_KEY"),
        ("bundled:Big Model", "lowercase"),
        ("bundled:smollm2-135m-instruct@main", "64-hex SHA-256 of its file"),
        ("s3:bucket/key", "unknown scheme"),
        ("S3:bucket/key@" + SHA, "unknown scheme"),
        ("my_scheme:x@" + SHA, "unknown scheme"),
        ("hf:", "nothing after"),
    ],
)
def test_bad_refs_say_why(text, reason):
    with pytest.raises(InvalidRefError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_ref(text)


def test_credentials_never_echoed():
    with pytest.raises(InvalidRefError) as info:
        parse_ref("openai:https://user:s3cr3t@host/v1#m")
    assert "s3cr3t" not in str(info.value)


def test_local_detection():
    assert parse_ref("hf:~/m").is_local
    assert not parse_ref(f"hf:a/b@{SHA}").is_local


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hf:org/name", ModelRef("hf", "org/name")),
        ("hf:org/name@main", ModelRef("hf", "org/name", "main")),
        ("hf:org/name@v1.0", ModelRef("hf", "org/name", "v1.0")),
        ("hf:org/name@Release-2", ModelRef("hf", "org/name", "Release-2")),
        ("hf:org/name@refs/pr/1", ModelRef("hf", "org/name", "refs/pr/1")),
        (f"hf:org/name@{SHA.upper()}", ModelRef("hf", "org/name", SHA)),
        ("gguf:org/repo/m.Q4.gguf", ModelRef("gguf", "org/repo", filename="m.Q4.gguf")),
        ("gguf:org/repo/m.Q4.gguf@main", ModelRef("gguf", "org/repo", "main", "m.Q4.gguf")),
        (f"hf:./smol@{SHA256}", ModelRef("hf", "./smol", SHA256)),
        ("openai:http://h/v1#m", ModelRef("openai", "http://h/v1", model_name="m")),
    ],
)
def test_allow_moving_accepts_branches_and_missing_revisions(text, expected):
    ref = parse_ref(text, allow_moving=True)
    assert ref == expected
    assert parse_ref(ref.canonical(), allow_moving=True) == ref


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"hf:org/name@{SHA256}", "40-hex commit, not a SHA-256"),
        ("hf:/local@main", "64-hex SHA-256"),
        (f"hf:/local@{SHA}", "64-hex SHA-256"),
        ("hf:org/name@bad name", "branch and tag names move"),
        ("hf:org/name@../up", "branch and tag names move"),
        ("hf:org/name@", "branch and tag names move"),
        ("hf:notarepo@main", "not an owner/name repo id"),
        ("gguf:org/repo/m.bin@main", "expected gguf:"),
    ],
)
def test_allow_moving_still_rejects_bad_refs(text, reason):
    with pytest.raises(InvalidRefError, match=reason):
        parse_ref(text, allow_moving=True)


@pytest.mark.parametrize("text", ["hf:org/name", "hf:org/name@main", "gguf:o/r/m.gguf@v1"])
def test_moving_refs_are_rejected_by_default(text):
    with pytest.raises(InvalidRefError):
        parse_ref(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"vllm:whatever@{SHA}", ModelRef("vllm", "whatever", SHA)),
        (f"vllm:org/name@{SHA256.upper()}", ModelRef("vllm", "org/name", SHA256)),
        (f"my-backend:a@b#c@{SHA}", ModelRef("my-backend", "a@b#c", SHA)),
        (f"mock:say/%23%23%23%23%204@{SHA256}", ModelRef("mock", "say/%23%23%23%23%204", SHA256)),
    ],
)
def test_a_plugin_scheme_parses_pinned(text, expected):
    ref = parse_ref(text)
    assert ref == expected
    assert not ref.is_local
    assert parse_ref(ref.canonical()) == ref
    assert parse_ref(text, allow_moving=True) == ref


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("vllm:whatever", "a backend plugin's ref is pinned: vllm:<location>@<40-hex commit"),
        ("vllm:whatever@main", "pinned"),
        ("vllm:whatever@" + SHA[:-1], "pinned"),
        ("vllm:@" + SHA, "nothing between 'vllm:' and '@'"),
        ("vllm:a b@" + SHA, "whitespace or control characters"),
        ("vllm:a\x00b@" + SHA, "whitespace or control characters"),
        ("x" * 33 + ":a@" + SHA, "unknown scheme"),
    ],
)
def test_a_plugin_ref_is_always_pinned(text, reason):
    for allow_moving in (False, True):  # nothing resolves a plugin's branch names
        with pytest.raises(InvalidRefError, match=re.escape(reason)):
            parse_ref(text, allow_moving=allow_moving)


@pytest.mark.parametrize(
    ("ref", "base", "engine"),
    [
        ("gguf:./m.gguf", None, "llamacpp"),
        ("bundled:smollm2-135m-instruct", None, "llamacpp"),
        (f"hf:org/m@{'a' * 40}", None, "transformers"),
        (f"hf:org/lora@{'a' * 40}", f"hf:org/base@{'b' * 40}", "transformers"),
        (f"hf:org/lora@{'a' * 40}", "bundled:smollm2-135m-instruct", "llamacpp"),
        (f"hf:org/lora@{'a' * 40}", f"gguf:org/base/m.gguf@{'b' * 40}", "llamacpp"),
        ("openai:https://example.org/v1#m", None, "endpoint"),
        (f"mock:tiny@{'a' * 64}", None, None),
    ],
)
def test_the_engine_follows_the_file_an_adapter_runs_on(ref, base, engine):
    assert engine_for(parse_ref(ref), None if base is None else parse_ref(base)) == engine


@pytest.mark.parametrize(
    ("base", "revision", "expected"),
    [
        ("org/base", "b" * 40, None),  # a transformers checkpoint
        ("/models/base", None, None),
        ("bundled:smollm2-135m-instruct", None, "bundled:smollm2-135m-instruct"),
        ("gguf:/models/m.gguf", None, "gguf:/models/m.gguf"),
        ("gguf:org/base/m.gguf", "b" * 40, f"gguf:org/base/m.gguf@{'b' * 40}"),
        (f"gguf:org/base/m.gguf@{'c' * 40}", "b" * 40, f"gguf:org/base/m.gguf@{'c' * 40}"),
    ],
)
def test_an_adapters_gguf_base_is_read_from_its_config(base, revision, expected):
    found = gguf_adapter_base(base, revision)
    assert (None if found is None else found.canonical()) == expected


def test_an_unpinned_hub_gguf_base_is_refused():
    with pytest.raises(InvalidRefError, match="pinned to a 40-hex commit"):
        gguf_adapter_base("gguf:org/base/m.gguf", None)
