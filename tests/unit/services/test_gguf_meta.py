"""The incremental GGUF header reader, checked against the ``gguf`` package's reader."""

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quorumbench.errors import RegistrationError
from quorumbench.services._gguf_meta import FILE_TYPES, read_gguf, read_gguf_header
from quorumbench.services._ranges import FileSource

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")


@dataclass
class CountingSource:
    """A byte source over bytes in memory that counts reads and bytes served."""

    data: bytes
    name: str = "mem.gguf"
    reads: list[tuple[int, int]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def served(self) -> int:
        return sum(length for _, length in self.reads)

    def read(self, start: int, length: int) -> bytes:
        chunk = self.data[start : start + length]
        self.reads.append((start, len(chunk)))
        return chunk


def _write(path: Path, *, big_endian: bool = False, vocab: int = 3) -> Path:
    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(path, "llama", endianess=endian)
    writer.add_name("Every Type")
    writer.add_license("apache-2.0")
    writer.add_context_length(4096)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_base_model_count(1)
    writer.add_base_model_name(0, "Base")
    writer.add_base_model_repo_url(0, "https://huggingface.co/org/base")
    writer.add_size_label("1K")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab)])
    writer.add_array("tokenizer.ggml.scores", [float(i) for i in range(vocab)])
    writer.add_array("x.nested", [[1, 2], [3, 4, 5]])
    writer.add_bool("x.flag", True)
    writer.add_float64("x.f64", 1.5)
    writer.add_int64("x.i64", -3)
    writer.add_uint16("x.u16", 7)
    writer.add_tensor("token_embd.weight", np.zeros((vocab, 8), dtype=np.float32))
    writer.add_tensor("blk.0.w", np.zeros((2, 3, 4), dtype=np.float16))
    writer.add_tensor("norm", np.zeros((5,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("big_endian", [False, True])
def test_header_matches_the_gguf_reader(tmp_path, big_endian):
    path = _write(tmp_path / "m.gguf", big_endian=big_endian)
    info = read_gguf(path)
    reader = gguf.GGUFReader(path)
    assert info.params == sum(int(t.n_elements) for t in reader.tensors) == 3 * 8 + 24 + 5
    assert info.details["tensor_count"] == len(reader.tensors) == 3
    assert (info.architecture, info.name, info.license) == ("llama", "Every Type", "apache-2.0")
    assert (info.context_length, info.file_type) == (4096, "Q4_K_M")
    assert info.base_model == "hf:org/base"
    assert info.details["base_model_name"] == "Base"
    assert info.details["size_label"] == "1K"
    assert info.details["size"] == path.stat().st_size
    assert info.details["file"] == "m.gguf"
    assert info.header_bytes <= reader.data_offset


def test_the_header_is_read_in_geometrically_growing_pieces(tmp_path):
    path = _write(tmp_path / "vocab.gguf", vocab=40_000)
    source = CountingSource(path.read_bytes())
    info = read_gguf_header(source, first=1024)
    assert info.params == 40_000 * 8 + 24 + 5
    header = info.header_bytes
    assert header > 500_000
    # reads are contiguous from the start, each at least doubling what is held
    held = 0
    for start, length in source.reads:
        assert start == held
        assert length >= held or start + length == source.size
        held += length
    assert len(source.reads) <= (header // 1024).bit_length() + 1
    assert header <= source.served < 2 * header


def test_a_small_header_is_one_read(tmp_path):
    source = CountingSource(_write(tmp_path / "m.gguf").read_bytes())
    read_gguf_header(source)
    assert len(source.reads) == 1


def test_every_truncation_is_a_registration_error(tmp_path):
    data = _write(tmp_path / "m.gguf").read_bytes()
    header = read_gguf_header(CountingSource(data)).header_bytes
    for cut in range(header):
        with pytest.raises(RegistrationError, match="inside its header|not a GGUF file"):
            read_gguf_header(CountingSource(data[:cut]))


def test_corrupt_headers_never_raise_anything_else(tmp_path):
    data = _write(tmp_path / "m.gguf").read_bytes()
    header = read_gguf_header(CountingSource(data)).header_bytes
    rng = random.Random(0)
    refused = 0
    for _ in range(300):
        corrupt = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            corrupt[rng.randrange(4, header)] = rng.randrange(256)
        try:
            read_gguf_header(CountingSource(bytes(corrupt)))
        except RegistrationError:
            refused += 1
    assert refused > 0


def test_not_a_gguf_file_and_old_versions_are_refused(tmp_path):
    with pytest.raises(RegistrationError, match="mem.gguf is not a GGUF file"):
        read_gguf_header(CountingSource(b"PK\x03\x04" + bytes(100)))
    v1 = b"GGUF" + struct.pack("<IQQ", 1, 0, 0)
    with pytest.raises(RegistrationError, match="GGUF version 1; versions 2 and 3"):
        read_gguf_header(CountingSource(v1))
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(RegistrationError, match="empty.gguf ends after 0 bytes"):
        read_gguf_header(FileSource(tmp_path / "empty.gguf"))


def test_a_header_claiming_a_huge_string_is_refused_without_reading_on():
    # one key/value whose key claims to be 2**40 bytes long
    data = b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**40) + bytes(64)
    source = CountingSource(data + bytes(10**6))
    with pytest.raises(RegistrationError, match="header would be larger than"):
        read_gguf_header(source)
    assert source.served <= 64 * 1024


def test_split_and_unknown_file_types_are_reported(tmp_path):
    writer = gguf.GGUFWriter(tmp_path / "s.gguf", "llama")
    writer.add_uint16("split.count", 3)
    writer.add_uint32("general.file_type", 999)
    writer.add_tensor("a", np.zeros((2,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    info = read_gguf(tmp_path / "s.gguf")
    assert info.details["split_count"] == 3
    assert info.file_type == "unknown-999"


def test_file_type_names_agree_with_the_gguf_package():
    for number, name in FILE_TYPES.items():
        assert gguf.LlamaFileType(number).name.removeprefix("MOSTLY_").removeprefix("ALL_") == name
