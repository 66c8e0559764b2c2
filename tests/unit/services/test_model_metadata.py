import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quorumbench.backends._files import dir_sha256, file_sha256
from quorumbench.errors import InvalidRefError, RegistrationError
from quorumbench.services.model_metadata import (
    HubFile,
    HubRepo,
    ModelSize,
    bundled_name,
    inspect_model,
    model_size,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SHA = "0123456789abcdef0123456789abcdef01234567"
BASE_SHA = "fedcba9876543210fedcba9876543210fedcba98"
README = "---\nlicense: apache-2.0\nbase_model: HuggingFaceTB/SmolLM2-135M\n---\n# Tiny\n"


def _tiny_llama(directory: Path, *, tie: bool = False):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, int]:
    directory = tmp_path_factory.mktemp("tiny")
    model = _tiny_llama(directory)
    return directory, sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def adapter(tiny, tmp_path_factory) -> tuple[Path, int]:
    peft = pytest.importorskip("peft")
    base = transformers.LlamaForCausalLM.from_pretrained(tiny[0])
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"])
    model = peft.get_peft_model(base, config)
    directory = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(directory)
    lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    return directory, lora


# --- local transformers checkpoints -------------------------------------------------


@pytest.mark.parametrize("tie", [False, True])
def test_local_checkpoint_metadata(tmp_path, tie):
    model = _tiny_llama(tmp_path / "m", tie=tie)
    meta = inspect_model(f"hf:{tmp_path / 'm'}")
    assert meta.params == sum(p.numel() for p in model.parameters())
    assert meta.architecture == "LlamaForCausalLM"
    assert meta.context_length == 64
    assert meta.dtype == "float32"
    assert meta.quantization is None
    assert meta.name == "m"
    assert meta.ref.canonical() == f"hf:{tmp_path / 'm'}@{dir_sha256(tmp_path / 'm')}"
    assert meta.details["files"] == ["model.safetensors"]
    assert meta.license is None and meta.base_ref is None


def test_weights_hash_ignores_everything_but_the_weights(tiny, tmp_path):
    first = inspect_model(f"hf:{tiny[0]}")
    copy = tmp_path / "copy"
    shutil.copytree(tiny[0], copy)
    (copy / "README.md").write_text(README, encoding="utf-8")
    second = inspect_model(f"hf:{copy}")
    assert second.weights_sha256 == first.weights_sha256
    assert second.ref.revision != first.ref.revision
    assert second.license == "apache-2.0"
    assert second.base_ref == "hf:HuggingFaceTB/SmolLM2-135M"
    assert inspect_model(f"hf:{copy}").weights_sha256 == first.weights_sha256


def test_weights_hash_changes_with_a_weight(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "copy"
    shutil.copytree(tiny[0], copy)
    tensors = load_file(copy / "model.safetensors")
    tensors["model.norm.weight"][0] += 1.0
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    changed = inspect_model(f"hf:{copy}")
    assert changed.weights_sha256 != inspect_model(f"hf:{tiny[0]}").weights_sha256
    assert changed.params == tiny[1]


def test_pinned_local_hash_must_match(tiny):
    digest = dir_sha256(tiny[0])
    assert inspect_model(f"hf:{tiny[0]}@{digest}").ref.revision == digest
    with pytest.raises(RegistrationError, match="hashes to"):
        inspect_model(f"hf:{tiny[0]}@{'ab' * 32}")


def test_local_errors_name_the_path(tmp_path):
    with pytest.raises(InvalidRefError, match="not found"):
        inspect_model(f"hf:{tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RegistrationError, match="no model weights"):
        inspect_model(f"hf:{tmp_path / 'empty'}")
    with pytest.raises(InvalidRefError, match="unknown scheme"):
        inspect_model("s3:bucket/key")


@pytest.mark.parametrize("ref", [f"vllm:org/model@{SHA}", f"mock:empty@{SHA}"])
def test_a_plugin_or_mock_scheme_is_not_inspected(ref):
    scheme = ref.partition(":")[0]
    with pytest.raises(RegistrationError, match=f"the server cannot inspect {scheme}: models"):
        inspect_model(ref)


# --- LoRA adapters --------------------------------------------------------------------


def test_local_adapter_pins_its_local_base(tiny, adapter):
    meta = inspect_model(f"hf:{adapter[0]}")
    assert meta.architecture == "lora"
    assert meta.params == adapter[1]
    assert meta.base_ref == f"hf:{tiny[0]}@{dir_sha256(tiny[0])}"
    assert meta.details["r"] == 4
    assert meta.details["lora_alpha"] == 8
    assert meta.details["target_modules"] == ["q_proj", "v_proj"]
    assert meta.details["kind"] == "adapter"
    assert meta.details["base_params"] == tiny[1]  # from the base's safetensors header
    assert model_size(meta.params, meta.details).effective_params == tiny[1] + adapter[1]


def _with_base(adapter_dir: Path, tmp_path: Path, **changes) -> Path:
    copy = tmp_path / "adapter"
    shutil.copytree(adapter_dir, copy)
    config = json.loads((copy / "adapter_config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (copy / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    return copy


def test_an_adapter_on_a_gguf_conversion_names_the_gguf_file(tiny, adapter, tmp_path):
    from quorumbench.backends.local import MARKER

    digest = "e" * 64
    converted = tmp_path / "gguf" / digest
    shutil.copytree(tiny[0], converted)
    (converted / MARKER).write_text(f"model.Q8_0.gguf\n{digest}\n", encoding="utf-8")
    made_on = _with_base(adapter[0], tmp_path / "a", base_model_name_or_path=str(converted))
    meta = inspect_model(f"hf:{made_on}")
    assert meta.details["base_gguf_sha256"] == digest
    assert meta.details["base_params"] == tiny[1]  # the conversion's safetensors header
    assert meta.base_ref == f"hf:{converted}@{dir_sha256(converted)}"
    (converted / MARKER).write_text("model.gguf\nnot-a-digest\n", encoding="utf-8")
    again = _with_base(adapter[0], tmp_path / "b", base_model_name_or_path=str(converted))
    assert "base_gguf_sha256" not in inspect_model(f"hf:{again}").details
    assert "base_gguf_sha256" not in inspect_model(f"hf:{adapter[0]}").details


def test_adapter_with_unpinned_hub_base_is_refused(adapter, tmp_path):
    copy = _with_base(adapter[0], tmp_path, base_model_name_or_path="org/tiny", revision=None)
    with pytest.raises(RegistrationError, match="not pinned"):
        inspect_model(f"hf:{copy}", hub=FakeHub())
    copy = _with_base(adapter[0], tmp_path / "x", base_model_name_or_path="org/tiny")
    json_config = json.loads((copy / "adapter_config.json").read_text(encoding="utf-8"))
    json_config["revision"] = "main"
    (copy / "adapter_config.json").write_text(json.dumps(json_config), encoding="utf-8")
    with pytest.raises(RegistrationError, match="not pinned"):
        inspect_model(f"hf:{copy}", hub=FakeHub())


def test_adapter_with_missing_local_base_is_refused(adapter, tmp_path):
    copy = _with_base(adapter[0], tmp_path, base_model_name_or_path=str(tmp_path / "gone"))
    with pytest.raises(RegistrationError, match="base is missing.*gone"):
        inspect_model(f"hf:{copy}")


# --- GGUF -----------------------------------------------------------------------------


def _tiny_gguf(path: Path, arch: str = "llama") -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("Tiny Test")
    writer.add_context_length(64)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_license("mit")
    writer.add_base_model_count(1)
    writer.add_base_model_repo_url(0, "https://huggingface.co/org/base")
    writer.add_tensor("a", np.zeros((4, 8), dtype=np.float32))
    writer.add_tensor("b", np.zeros((3,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_local_gguf(tmp_path):
    path = _tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    meta = inspect_model(f"gguf:{path}")
    digest = file_sha256(path)
    assert meta.ref.canonical() == f"gguf:{path}@{digest}"
    assert meta.weights_sha256 == digest
    assert (meta.params, meta.architecture, meta.context_length) == (35, "llama", 64)
    assert (meta.quantization, meta.license, meta.name) == ("Q8_0", "mit", "Tiny Test")
    assert meta.base_ref == "hf:org/base"
    assert meta.details["tensor_count"] == 2


def test_an_adapter_on_a_gguf_file_is_pinned_to_it_and_its_architecture_checked(adapter, tmp_path):
    base = _tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    made_on = _with_base(adapter[0], tmp_path / "a", base_model_name_or_path=f"gguf:{base}")
    meta = inspect_model(f"hf:{made_on}")
    assert meta.base_ref == f"gguf:{base}@{file_sha256(base)}"
    assert meta.details["kind"] == "adapter" and meta.details["base_params"] == 35
    # an architecture whose adapters llama.cpp does not run here: refused at once,
    # not left to fail on every runner
    other = _tiny_gguf(tmp_path / "other.gguf", arch="gpt2")
    on_other = _with_base(adapter[0], tmp_path / "b", base_model_name_or_path=f"gguf:{other}")
    with pytest.raises(RegistrationError, match="architecture 'gpt2'") as refused:
        inspect_model(f"hf:{on_other}")
    assert refused.value.check == "base-unsupported"


@pytest.mark.model
def test_bundled_smollm2_gguf(smollm2_gguf):
    meta = inspect_model(f"gguf:{smollm2_gguf}")
    assert 130_000_000 < (meta.params or 0) < 140_000_000
    assert meta.architecture == "llama"
    assert meta.context_length == 8192
    assert meta.quantization == "Q4_1"
    assert meta.license == "apache-2.0"
    assert meta.weights_sha256 == meta.ref.revision
    assert meta.name == "Smollm2 135M 8k Lc100K Mix1 Ep2"  # the header's general.name
    bundled = inspect_model("bundled:smollm2-135m-instruct")
    assert bundled.name == "SmolLM2-135M-Instruct"  # the bundled model's own name
    assert bundled.ref.canonical() == f"bundled:smollm2-135m-instruct@{meta.ref.revision}"
    assert bundled.weights_sha256 == meta.weights_sha256
    assert bundled.details["bundled"] == "smollm2-135m-instruct"
    assert inspect_model(bundled.ref.canonical()).ref == bundled.ref  # a pinned ref is kept
    with pytest.raises(RegistrationError, match="but the ref pins"):
        inspect_model(f"bundled:smollm2-135m-instruct@{'0' * 64}")


# --- the Hub, through a fake client ---------------------------------------------------


@dataclass
class FakeHub:
    """A Hub with repos mirrored from local directories; records calls and bytes read."""

    repos: dict[str, HubRepo] = field(default_factory=dict)
    paths: dict[tuple[str, str], Path] = field(default_factory=dict)
    branches: dict[tuple[str, str | None], str] = field(default_factory=dict)
    fail: Exception | None = None
    calls: list[str] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)
    """Bytes read per ``repo/file``."""

    def add(self, repo_id: str, sha: str, directory: Path, *, lfs: bool = True) -> None:
        files = []
        for path in sorted(p for p in directory.iterdir() if p.is_file()):
            digest = file_sha256(path) if lfs else None
            files.append(HubFile(path.name, path.stat().st_size, digest))
            self.paths[(repo_id, path.name)] = path
        self.repos[repo_id] = HubRepo(sha, tuple(files))
        self.branches[(repo_id, None)] = self.branches[(repo_id, "main")] = sha
        self.branches[(repo_id, sha)] = sha

    def repo(self, repo_id, revision):
        self.calls.append(f"repo {repo_id}@{revision}")
        if self.fail is not None:
            raise self.fail
        if (repo_id, revision) not in self.branches:
            raise LookupError(f"404 Revision Not Found: {repo_id}@{revision}\nRequest ID: x")
        return self.repos[repo_id]

    def content(self, repo_id, filename, start, length):
        with self.paths[(repo_id, filename)].open("rb") as handle:
            handle.seek(start)
            return handle.read(length)

    def read(self, repo_id, filename, revision, start, length):
        self.calls.append(f"read {repo_id}/{filename}")
        assert revision == self.repos[repo_id].sha
        data = self.content(repo_id, filename, start, length)
        key = f"{repo_id}/{filename}"
        self.served[key] = self.served.get(key, 0) + len(data)
        return data


@pytest.mark.parametrize("suffix", ["", "@main", f"@{SHA}"])
def test_hub_ref_resolves_to_a_commit(tiny, suffix):
    hub = FakeHub()
    hub.add("org/tiny", SHA, tiny[0])
    meta = inspect_model(f"hf:org/tiny{suffix}", hub=hub)
    assert meta.ref.canonical() == f"hf:org/tiny@{SHA}"
    assert meta.name == "tiny"
    assert meta.params == tiny[1]
    assert (meta.dtype, meta.context_length) == ("float32", 64)
    assert meta.architecture == "LlamaForCausalLM"
    # the weights hash comes from LFS SHA-256s and equals the local copy's
    assert meta.weights_sha256 == inspect_model(f"hf:{tiny[0]}").weights_sha256
    # the weights file is read as far as its header only
    header = 8 + int.from_bytes((tiny[0] / "model.safetensors").read_bytes()[:8], "little")
    assert header <= hub.served["org/tiny/model.safetensors"] <= max(header, 64 * 1024)


def test_hub_file_outside_lfs_is_hashed_by_reading_it(tiny):
    hub = FakeHub()
    hub.add("org/tiny", SHA, tiny[0], lfs=False)
    meta = inspect_model("hf:org/tiny@main", hub=hub)
    assert meta.weights_sha256 == inspect_model(f"hf:{tiny[0]}").weights_sha256
    size = (tiny[0] / "model.safetensors").stat().st_size
    assert hub.served["org/tiny/model.safetensors"] >= size  # hashed in memory


def test_a_large_hub_file_outside_lfs_is_refused(tiny):
    hub = FakeHub()
    hub.add("org/tiny", SHA, tiny[0], lfs=False)
    files = [
        HubFile(f.name, 10**9, None) if f.name == "model.safetensors" else f
        for f in hub.repos["org/tiny"].files
    ]
    hub.repos["org/tiny"] = HubRepo(SHA, tuple(files))
    with pytest.raises(RegistrationError, match="no LFS SHA-256 and is too large"):
        inspect_model("hf:org/tiny@main", hub=hub)


def test_unknown_hub_revision_is_a_registration_error(tiny):
    hub = FakeHub()
    hub.add("org/tiny", SHA, tiny[0])
    with pytest.raises(RegistrationError, match="Revision Not Found") as info:
        inspect_model("hf:org/tiny@v9", hub=hub)
    assert "Request ID" not in str(info.value)


def test_network_error_becomes_registration_error():
    hub = FakeHub(fail=ConnectionError("Failed to resolve 'huggingface.co'\ntraceback..."))
    with pytest.raises(RegistrationError, match="ConnectionError: Failed to resolve") as info:
        inspect_model("hf:org/tiny@main", hub=hub)
    assert "traceback" not in str(info.value)


def test_hub_repo_without_config_is_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    hub = FakeHub()
    hub.add("org/odd", SHA, tmp_path)
    with pytest.raises(RegistrationError, match="no config.json"):
        inspect_model("hf:org/odd", hub=hub)


def test_hub_adapter_pins_its_hub_base(tiny, adapter, tmp_path):
    copy = _with_base(adapter[0], tmp_path, base_model_name_or_path="org/tiny", revision=BASE_SHA)
    hub = FakeHub()
    hub.add("org/tiny", BASE_SHA, tiny[0])
    hub.add("me/lora", SHA, copy)
    meta = inspect_model("hf:me/lora@main", hub=hub)
    assert meta.ref.canonical() == f"hf:me/lora@{SHA}"
    assert meta.base_ref == f"hf:org/tiny@{BASE_SHA}"
    assert meta.params == adapter[1]
    assert meta.architecture == "lora"
    assert f"repo org/tiny@{BASE_SHA}" in hub.calls
    # the base's size, read from its safetensors header
    assert meta.details["base_params"] == tiny[1]
    size = model_size(meta.params, meta.details)
    assert size == ModelSize(tiny[1] + adapter[1], adapter[1], tiny[1])
    assert hub.served["org/tiny/model.safetensors"] <= 64 * 1024  # one read of its start


def test_an_adapter_whose_base_has_only_pickled_weights_has_no_effective_size(adapter, tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}", encoding="utf-8")
    (base / "pytorch_model.bin").write_bytes(b"pickle")
    copy = _with_base(
        adapter[0], tmp_path, base_model_name_or_path="org/pickled", revision=BASE_SHA
    )
    hub = FakeHub()
    hub.add("org/pickled", BASE_SHA, base)
    hub.add("me/lora", SHA, copy)
    meta = inspect_model("hf:me/lora@main", hub=hub)
    assert "base_params" not in meta.details
    assert "no safetensors" in meta.details["base_params_unknown"]
    assert model_size(meta.params, meta.details) == ModelSize(None, adapter[1], None)


def test_hub_adapter_with_unpinned_or_local_base_is_refused(tiny, adapter, tmp_path):
    hub = FakeHub()
    hub.add("org/tiny", BASE_SHA, tiny[0])
    unpinned = _with_base(adapter[0], tmp_path / "a", base_model_name_or_path="org/tiny")
    hub.add("me/unpinned", SHA, unpinned)
    with pytest.raises(RegistrationError, match="'org/tiny' is not pinned"):
        inspect_model("hf:me/unpinned", hub=hub)
    hub.add("me/local", SHA, adapter[0])
    with pytest.raises(RegistrationError, match="must be a Hub repo"):
        inspect_model("hf:me/local", hub=hub)


def test_hub_gguf_reads_a_small_file(tmp_path):
    _tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    hub = FakeHub()
    hub.add("org/tiny-gguf", SHA, tmp_path)
    meta = inspect_model("gguf:org/tiny-gguf/tiny.Q8_0.gguf@main", hub=hub)
    assert meta.ref.canonical() == f"gguf:org/tiny-gguf/tiny.Q8_0.gguf@{SHA}"
    assert meta.weights_sha256 == file_sha256(tmp_path / "tiny.Q8_0.gguf")
    assert (meta.params, meta.quantization, meta.context_length) == (35, "Q8_0", 64)


class BigGGUFHub(FakeHub):
    """Serves ``big.Q4_0.gguf``: a real GGUF header followed by 3 GiB of zeros."""

    def content(self, repo_id, filename, start, length):
        if filename != "big.Q4_0.gguf":
            return super().content(repo_id, filename, start, length)
        head = self.paths[(repo_id, "tiny.Q8_0.gguf")].read_bytes()
        end = min(start + length, 3 * 1024**3)
        return head[start:end] + bytes(max(0, end - max(start, len(head))))


def test_hub_gguf_of_any_size_is_read_from_its_header(tmp_path):
    _tiny_gguf(tmp_path / "tiny.Q8_0.gguf")
    hub = BigGGUFHub()
    hub.add("org/big", SHA, tmp_path)
    big = HubFile("big.Q4_0.gguf", 3 * 1024**3, "cd" * 32)
    hub.repos["org/big"] = HubRepo(SHA, (*hub.repos["org/big"].files, big))
    meta = inspect_model("gguf:org/big/big.Q4_0.gguf", hub=hub)
    assert (meta.params, meta.quantization, meta.context_length) == (35, "Q8_0", 64)
    assert meta.weights_sha256 == "cd" * 32  # the LFS hash: the file is never hashed here
    assert meta.details["size"] == 3 * 1024**3
    assert "params_unknown" not in meta.details
    assert hub.served["org/big/big.Q4_0.gguf"] <= 64 * 1024
    with pytest.raises(RegistrationError, match="no file other.gguf"):
        inspect_model("gguf:org/big/other.gguf", hub=hub)


def test_a_hub_file_that_is_not_a_gguf_is_refused(tiny, tmp_path):
    shutil.copy(tiny[0] / "model.safetensors", tmp_path / "fake.gguf")
    hub = FakeHub()
    hub.add("org/fake", SHA, tmp_path)
    with pytest.raises(RegistrationError, match="fake.gguf@.* is not a GGUF file"):
        inspect_model("gguf:org/fake/fake.gguf", hub=hub)


def test_a_failing_range_read_is_a_registration_error(tmp_path):
    _tiny_gguf(tmp_path / "tiny.Q8_0.gguf")

    class Broken(FakeHub):
        def read(self, *args):
            raise ConnectionError("reset by peer\ntraceback...")

    hub = Broken()
    hub.add("org/tiny-gguf", SHA, tmp_path)
    with pytest.raises(RegistrationError, match="cannot read org/tiny-gguf/tiny.Q8_0.gguf") as info:
        inspect_model("gguf:org/tiny-gguf/tiny.Q8_0.gguf", hub=hub)
    assert "ConnectionError: reset by peer" in str(info.value)
    assert "traceback" not in str(info.value)


# --- endpoints and bad refs -----------------------------------------------------------


def test_openai_ref_makes_no_calls():
    hub = FakeHub(fail=AssertionError("no network for openai refs"))
    meta = inspect_model("openai:http://127.0.0.1:8000/v1#smol", hub=hub)
    assert meta.name == "smol"
    assert meta.ref.canonical() == "openai:http://127.0.0.1:8000/v1#smol"
    assert meta.details == {"kind": "endpoint", "endpoint": "http://127.0.0.1:8000/v1"}
    assert (meta.params, meta.weights_sha256, meta.ref.revision) == (None, None, None)
    assert hub.calls == []


@pytest.mark.parametrize(
    "text", ["hf:org/tiny@" + "ab" * 32, "hf:/local@main", "hf:notarepo", "hf:org/x@bad name"]
)
def test_bad_refs_are_invalid(text):
    with pytest.raises(InvalidRefError):
        inspect_model(text, hub=FakeHub())


def test_a_bundled_model_is_named_after_its_file():
    assert bundled_name("smollm2-135m-instruct") == "SmolLM2-135M-Instruct"
