"""Registering Hub models reads their headers only, through HTTP range requests.

A local Hub (a ThreadingHTTPServer) answers ``/api/models/<repo>/revision/<rev>``
(the listing ``huggingface_hub`` asks for) and ``/<repo>/resolve/<rev>/<file>``,
which redirects to ``/blobs/<sha256>`` as the Hub redirects to its storage; blobs
honour ``Range`` and count the bytes they send. The server registers through the real
:class:`HfHubClient` pointed at it: the GGUF it serves is the bundled SmolLM2 file.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from quorumbench.services.model_metadata import HfHubClient, inspect_model

SHA = "0123456789abcdef0123456789abcdef01234567"
BASE_SHA = "fedcba9876543210fedcba9876543210fedcba98"
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Blob:
    name: str
    path: Path
    sha256: str
    size: int
    lfs: bool = True


@dataclass
class LocalHub:
    """What the local Hub serves, and what it sent."""

    repos: dict[str, tuple[str, dict[str, Blob]]] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    """Bytes of each file sent, by file name."""
    requests: list[str] = field(default_factory=list)
    broken: dict[str, int] = field(default_factory=dict)
    """File name → HTTP status its blob answers with instead of the content."""
    private: set[str] = field(default_factory=set)
    """Repos this Hub's token may not read (answered as the Hub does: 401, not found)."""
    ignore_range: bool = False
    url: str = ""

    def add(self, repo_id: str, sha: str, files: dict[str, Path], *, lfs: bool = True) -> None:
        blobs = {}
        for name, path in files.items():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            blobs[name] = Blob(name, path, digest, path.stat().st_size, lfs)
        self.repos[repo_id] = (sha, blobs)

    def blob(self, digest: str) -> Blob | None:
        return next(
            (b for _, files in self.repos.values() for b in files.values() if b.sha256 == digest),
            None,
        )


class _Handler(BaseHTTPRequestHandler):
    hub: LocalHub

    def log_message(self, format, *args):  # quiet
        pass

    def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        hub = self.hub
        path = self.path.split("?", 1)[0]
        hub.requests.append(f"{self.headers.get('Range', '-')} {path}")
        listing = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        blob = re.fullmatch(r"/blobs/([0-9a-f]{64})", path)
        if listing:
            repo, revision = listing.groups()
            if repo in hub.private:
                self._json(401, {"error": "Repository Not Found"}, {"X-Error-Code": "RepoNotFound"})
                return
            if repo not in hub.repos or revision not in ("main", hub.repos[repo][0]):
                self._json(
                    404, {"error": "Revision Not Found"}, {"X-Error-Code": "RevisionNotFound"}
                )
                return
            sha, files = hub.repos[repo]
            siblings = [
                {
                    "rfilename": b.name,
                    "size": b.size,
                    **(
                        {"lfs": {"sha256": b.sha256, "size": b.size, "pointerSize": 134}}
                        if b.lfs
                        else {}
                    ),
                }
                for b in files.values()
            ]
            self._json(200, {"id": repo, "sha": sha, "siblings": siblings})
        elif resolve:
            repo, revision, name = resolve.groups()
            if (
                repo not in hub.repos
                or revision != hub.repos[repo][0]
                or name not in hub.repos[repo][1]
            ):
                self._json(404, {"error": "Entry not found"})
                return
            self.send_response(302)
            self.send_header("Location", f"{hub.url}/blobs/{hub.repos[repo][1][name].sha256}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif blob and (found := hub.blob(blob[1])) is not None:
            self._send_blob(found)
        else:
            self._json(404, {"error": "not found"})

    def _send_blob(self, blob: Blob) -> None:
        hub = self.hub
        if blob.name in hub.broken:
            self._json(hub.broken[blob.name], {"error": "storage says no"})
            return
        start, end = 0, blob.size - 1
        match = _RANGE.match(self.headers.get("Range", ""))
        partial = match is not None and not hub.ignore_range
        if partial:
            start = int(match[1])
            end = min(int(match[2]) if match[2] else blob.size - 1, blob.size - 1)
            if start >= blob.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{blob.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if partial else 200)
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end}/{blob.size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        with blob.path.open("rb") as handle:
            handle.seek(start)
            left = end - start + 1
            try:
                while left:
                    chunk = handle.read(min(left, 256 * 1024))
                    self.wfile.write(chunk)
                    hub.served[blob.name] = hub.served.get(blob.name, 0) + len(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client had what it needed


@pytest.fixture
def local_hub() -> Iterator[LocalHub]:
    hub = LocalHub()
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Disk:
    """The files under a directory, and those that appeared since :meth:`mark`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.marked = self.files()

    def files(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()}

    def mark(self) -> None:
        self.marked = self.files()

    def new(self) -> list[str]:
        """New files, the database's own files (SQLite) aside."""
        fresh = self.files() - self.marked
        return sorted(n for n in fresh if not re.fullmatch(r"qb\.db(-wal|-shm|-journal)?", n))


@pytest.fixture
def no_disk(tmp_path, monkeypatch) -> Disk:
    """HOME and every Hub cache moved under ``tmp_path``, which is also the server's
    data directory: what registration writes anywhere there shows in ``new()``."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    try:
        from huggingface_hub import constants
    except ImportError:
        pass
    else:
        for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE"):
            if hasattr(constants, name):
                monkeypatch.setattr(constants, name, str(home / ".cache" / name.lower()))
    return Disk(tmp_path)


@pytest.fixture
def hub_dir(tmp_path_factory) -> Path:
    """Where the files the local Hub serves are made (outside the server's directory)."""
    return tmp_path_factory.mktemp("hub")


@pytest.fixture
def registry(api, ctx, local_hub, people, no_disk):
    """POST /v0/models through the real Hub client, pointed at the local Hub."""

    def inspect(ref: str):
        with HfHubClient(local_hub.url, token="hf_test") as client:
            return inspect_model(ref, hub=client)

    ctx.inspector = inspect
    no_disk.mark()

    def register(ref: str, who: str = "owner"):
        return api.post(
            "/v0/models", json={"ref": ref}, headers={"Authorization": f"Bearer {people[who]}"}
        )

    return register


@pytest.mark.model
def test_a_hub_gguf_is_registered_from_its_header(
    registry, local_hub, smollm2_gguf, no_disk, hub_dir
):
    import gguf

    name = smollm2_gguf.name
    local_hub.add("org/smol-gguf", SHA, {name: smollm2_gguf, "README.md": _card(hub_dir)})
    response = registry(f"gguf:org/smol-gguf/{name}@main")
    assert response.status_code == 201, response.text
    body = response.json()
    full = sum(int(t.n_elements) for t in gguf.GGUFReader(smollm2_gguf).tensors)
    assert body["params"] == body["effective_params"] == full == 134_515_008
    assert body["adapter_params"] is None and body["base_params"] is None
    assert body["ref"] == f"gguf:org/smol-gguf/{name}@{SHA}"
    assert (body["architecture"], body["quantization"], body["context_length"]) == (
        "llama",
        "Q4_1",
        8192,
    )
    assert body["weights_sha256"] == hashlib.sha256(smollm2_gguf.read_bytes()).hexdigest()
    size = smollm2_gguf.stat().st_size
    fetched = local_hub.served[name]
    assert fetched < 0.05 * size, f"{fetched:,} of {size:,} bytes"
    # the header (1.79 MB) in pieces that double: 64 KiB, 128 KiB, … 2 MiB
    ranged = [r for r in local_hub.requests if r.endswith(name) and "resolve" in r]
    assert 1 < len(ranged) <= 7
    assert no_disk.new() == []


def _card(directory: Path) -> Path:
    card = directory / "README.md"
    card.write_text("---\nlicense: mit\n---\n# card\n", encoding="utf-8")
    return card


def _safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    """A safetensors file written by hand: 8-byte header length, JSON header, data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for tensor, shape in shapes.items():
        n = 4
        for dim in shape:
            n *= dim
        header[tensor] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as handle:
        handle.write(len(raw).to_bytes(8, "little") + raw)
        handle.write(b"\x01" * offset)
    return path


def _checkpoint(directory: Path, **shards: dict[str, tuple[int, ...]]) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 512}),
        encoding="utf-8",
    )
    files = {"config.json": directory / "config.json"}
    for name, shapes in shards.items():
        files[name] = _safetensors(directory / name, shapes)
    if len(shards) > 1:
        index = {"weight_map": {t: n for n, shapes in shards.items() for t in shapes}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
        files["model.safetensors.index.json"] = directory / "model.safetensors.index.json"
    return files


BIG = {"embed": (4096, 256), "layer.0": (512, 512)}  # 4.2 MB of float32
"""1,310,720 parameters."""


def test_hub_safetensors_are_read_as_far_as_their_headers(registry, local_hub, hub_dir, no_disk):
    files = _checkpoint(hub_dir / "repo", **{"model.safetensors": BIG})
    local_hub.add("org/dense", SHA, files)
    response = registry("hf:org/dense@main")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["params"] == body["effective_params"] == 4096 * 256 + 512 * 512
    assert (body["architecture"], body["context_length"]) == ("LlamaForCausalLM", 512)
    size = files["model.safetensors"].stat().st_size
    assert local_hub.served["model.safetensors"] < 0.05 * size
    assert no_disk.new() == []


def test_a_sharded_checkpoint_reads_each_shard_header(registry, local_hub, hub_dir):
    files = _checkpoint(
        hub_dir / "repo",
        **{
            "model-00001-of-00002.safetensors": BIG,
            "model-00002-of-00002.safetensors": {"head": (1024, 1024)},
        },
    )
    local_hub.add("org/sharded", SHA, files)
    response = registry("hf:org/sharded@main")
    assert response.status_code == 201, response.text
    assert response.json()["params"] == 4096 * 256 + 512 * 512 + 1024 * 1024
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        assert local_hub.served[name] < 0.05 * files[name].stat().st_size


def test_a_hub_lora_adapter_records_its_base_size(registry, local_hub, hub_dir):
    local_hub.add("org/base", BASE_SHA, _checkpoint(hub_dir / "base", **{"model.safetensors": BIG}))
    adapter = hub_dir / "adapter"
    adapter.mkdir()
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": "org/base",
        "revision": BASE_SHA,
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj"],
    }
    (adapter / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    lora = {"a.lora_A.weight": (4, 512), "a.lora_B.weight": (512, 4)}
    local_hub.add(
        "me/lora",
        SHA,
        {
            "adapter_config.json": adapter / "adapter_config.json",
            "adapter_model.safetensors": _safetensors(adapter / "adapter_model.safetensors", lora),
        },
    )
    response = registry("hf:me/lora@main")
    assert response.status_code == 201, response.text
    body = response.json()
    base = 4096 * 256 + 512 * 512
    assert body["base_ref"] == f"hf:org/base@{BASE_SHA}"
    assert body["params"] == body["adapter_params"] == 4096
    assert body["base_params"] == base
    assert body["effective_params"] == base + 4096
    assert (
        local_hub.served["model.safetensors"]
        < 0.05 * (hub_dir / "base" / "model.safetensors").stat().st_size
    )


def test_a_server_that_ignores_range_still_works(registry, local_hub, hub_dir):
    local_hub.ignore_range = True
    files = _checkpoint(hub_dir / "repo", **{"model.safetensors": {"w": (16, 16)}})
    local_hub.add("org/plain", SHA, files)
    response = registry("hf:org/plain@main")
    assert response.status_code == 201, response.text
    assert response.json()["params"] == 256


def _refused(response, *words: str) -> str:
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "/problems/registration-refused"
    assert "Traceback" not in problem["detail"]
    for word in words:
        assert word in problem["detail"], problem["detail"]
    return problem["detail"]


@pytest.mark.model
def test_a_truncated_gguf_is_refused(registry, local_hub, smollm2_gguf, hub_dir):
    cut = hub_dir / "cut.gguf"
    cut.write_bytes(smollm2_gguf.read_bytes()[:500_000])  # inside its 1.79 MB header
    local_hub.add("org/cut", SHA, {"cut.gguf": cut})
    _refused(registry("gguf:org/cut/cut.gguf@main"), "ends after 500,000 bytes, inside its header")


def test_not_a_gguf_and_http_errors_are_refused(registry, local_hub, hub_dir):
    text = hub_dir / "notes.gguf"
    text.write_text("these are not weights\n" * 100, encoding="utf-8")
    files = _checkpoint(hub_dir / "repo", **{"model.safetensors": {"w": (16, 16)}})
    local_hub.add("org/odd", SHA, {"notes.gguf": text, **files})
    _refused(registry("gguf:org/odd/notes.gguf@main"), "is not a GGUF file")
    local_hub.broken["model.safetensors"] = 500
    _refused(registry("hf:org/odd@main"), "cannot read org/odd/model.safetensors", "500")
    local_hub.broken["model.safetensors"] = 403
    _refused(registry("hf:org/odd@main"), "403")
    _refused(registry("hf:org/missing@main"), "cannot resolve hf:org/missing@main on the Hub")


def test_a_truncated_safetensors_header_is_refused(registry, local_hub, hub_dir):
    whole = _safetensors(hub_dir / "whole.safetensors", BIG).read_bytes()
    repo = _checkpoint(hub_dir / "repo")
    (hub_dir / "repo" / "model.safetensors").write_bytes(whole[:40])
    local_hub.add(
        "org/cut", SHA, {**repo, "model.safetensors": hub_dir / "repo" / "model.safetensors"}
    )
    _refused(registry("hf:org/cut@main"), "ends after 40 bytes, inside its header")


def test_an_adapter_whose_base_size_is_unknown_is_refused_for_non_admins(
    registry, local_hub, hub_dir
):
    base = hub_dir / "base"
    base.mkdir()
    (base / "config.json").write_text("{}", encoding="utf-8")
    (base / "pytorch_model.bin").write_bytes(b"not read")
    local_hub.add(
        "org/pickled",
        BASE_SHA,
        {"config.json": base / "config.json", "pytorch_model.bin": base / "pytorch_model.bin"},
    )
    adapter = hub_dir / "adapter"
    adapter.mkdir()
    config = {"base_model_name_or_path": "org/pickled", "revision": BASE_SHA, "peft_type": "LORA"}
    (adapter / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    files = {
        "adapter_config.json": adapter / "adapter_config.json",
        "adapter_model.safetensors": _safetensors(
            adapter / "adapter_model.safetensors", {"a": (4, 4)}
        ),
    }
    local_hub.add("me/lora", SHA, files)
    _refused(registry("hf:me/lora@main"), "parameter count is unknown", "no safetensors")
    response = registry("hf:me/lora@main", who="admin")
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["adapter_params"], body["base_params"], body["effective_params"]) == (
        16,
        None,
        None,
    )
