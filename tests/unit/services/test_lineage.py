from quorumbench.evaluation.refs import ModelRef
from quorumbench.services.lineage import revision_url, unpinned

SHA = "1" * 40
HASH = "2" * 64


def test_unpinned_drops_only_the_revision():
    assert unpinned(f"hf:org/m@{SHA}") == ModelRef("hf", "org/m")
    assert unpinned(f"gguf:org/r/f.gguf@{SHA}") == ModelRef("gguf", "org/r", filename="f.gguf")
    assert unpinned(f"hf:/models/a@b@{HASH}") == ModelRef("hf", "/models/a@b")
    assert unpinned(f"hf:/models/a@b@{HASH}") != unpinned(f"hf:/models/a@{HASH}")
    assert unpinned("openai:http://x/v1#m") == ModelRef("openai", "http://x/v1", model_name="m")
    assert unpinned("hf:org/m@main") is None  # a moving name is never stored
    assert unpinned("nonsense") is None


def test_revision_url_is_for_hub_refs_only():
    assert revision_url(f"hf:org/m@{SHA}", SHA) == f"https://huggingface.co/org/m/tree/{SHA}"
    # a local directory or file has no page on the Hub, whatever its path looks like
    assert revision_url(f"hf:./local@{HASH}", HASH) is None
    assert revision_url(f"hf:~/models/m@{HASH}", HASH) is None
    assert revision_url(f"gguf:~/m.gguf@{HASH}", HASH) is None
    assert revision_url(f"bundled:smollm2@{HASH}", HASH) is None
    assert revision_url("not a ref", SHA) is None
