"""The embedding model's own llama.cpp context, on the bundled all-MiniLM-L6-v2."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.core.backend import ModelLoadError
from app.core.llama.embedder import PACK_TOKENS, Embedder, EmbedderError
from app.core.llama.engine import Engine
from tests.core.helpers import PROBE, ask, user

pytestmark = pytest.mark.model  # the bundled embedding model, made by set-up

PASSAGES = [
    "A cat is sleeping on the warm windowsill.",
    "The kitten naps in the sun by the window.",
    "Interest rates were raised by the central bank to curb inflation.",
    "The central bank increased borrowing costs as prices kept climbing.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
]


@pytest.fixture(scope="module")
def embedder(minilm_path: Path) -> Iterator[Embedder]:
    model = Embedder(minilm_path)
    yield model
    model.close()


def test_what_it_says_of_itself(embedder: Embedder, minilm_path: Path) -> None:
    assert (embedder.path, embedder.name) == (minilm_path, "all-MiniLM-L6-v2.f16")
    assert (embedder.dim, embedder.max_tokens) == (384, 512)
    assert embedder.count("hello world") == 4  # [CLS] hello world [SEP]


def test_similar_passages_are_nearer_than_unrelated_ones(embedder: Embedder) -> None:
    vectors = embedder.embed(PASSAGES)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    for a, b in ((0, 1), (2, 3)):
        unrelated = [similarity[a, c] for c in range(5) if c not in (a, b)]
        assert similarity[a, b] > max(unrelated) + 0.2


def test_a_batch_gives_what_one_at_a_time_gives(embedder: Embedder) -> None:
    # Several passages to a decode, and more than one decode.
    texts = [" ".join(PASSAGES[: 1 + i % 5]) for i in range(12)] + [" ".join(PASSAGES) * 4]
    assert sum(embedder.count(t) for t in texts) > PACK_TOKENS
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([text]) for text in texts])
    assert float(np.min(np.sum(together * alone, axis=1))) >= 0.9999


def test_a_long_text_is_cut_to_the_trained_context(embedder: Embedder) -> None:
    words = [f"word{i} of a very long document" for i in range(500)]
    long_text = " ".join(words)
    assert len(long_text.split()) >= 3000
    assert embedder.count(long_text) > 4 * embedder.max_tokens
    longer = embedder.embed([long_text, long_text + " and a tail nobody reads"])
    assert np.isfinite(longer).all()
    # Only the first max_tokens count: what follows changes nothing.
    assert float(longer[0] @ longer[1]) >= 0.9999


def test_empty_input(embedder: Embedder) -> None:
    assert embedder.embed([]).shape == (0, 384)
    vector = embedder.embed([""])
    assert vector.shape == (1, 384) and np.isfinite(vector).all()
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_a_chat_model_is_refused(smollm2_path: Path) -> None:
    with pytest.raises(EmbedderError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf is not an "
                                            r"embedding model"):
        Embedder(smollm2_path)


def test_the_chat_engine_refuses_it_with_where_it_belongs(minilm_path: Path) -> None:
    engine = Engine()
    try:
        with pytest.raises(ModelLoadError, match=r"embedding model.*Settings → Documents"):
            engine.load(minilm_path).result(timeout=60)
    finally:
        engine.close()


def test_a_broken_file_is_refused(tmp_path: Path, minilm_path: Path) -> None:
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(os.urandom(4096))
    with pytest.raises(EmbedderError, match=r"noise\.gguf cannot be used"):
        Embedder(noise)
    cut = tmp_path / "cut-short.gguf"  # its header whole, half its weights
    cut.write_bytes(minilm_path.read_bytes()[: minilm_path.stat().st_size // 2])
    with pytest.raises(EmbedderError, match=r"cut-short\.gguf"):
        Embedder(cut)


def test_closed_it_says_so(minilm_path: Path) -> None:
    model = Embedder(minilm_path)
    model.close()
    model.close()
    with pytest.raises(EmbedderError, match="closed"):
        model.embed(["text"])


def test_the_chat_model_beside_it_answers_as_before(smollm2_path: Path,
                                                    embedder: Embedder) -> None:
    engine = Engine()
    try:
        engine.load(smollm2_path).result(120)
        before = ask(engine, user(PROBE)).text
        # Embedding while a reply is written, on another thread, then once more after it.
        embedded = threading.Event()

        def embed() -> None:
            embedder.embed(PASSAGES * 4)
            embedded.set()

        worker = threading.Thread(target=embed)
        engine.clear().result()
        worker.start()
        during = ask(engine, user(PROBE)).text
        worker.join(120)
        assert embedded.is_set()
        embedder.embed(PASSAGES)
        engine.clear().result()
        after = ask(engine, user(PROBE)).text
    finally:
        assert engine.close()
    assert before == during == after
    assert before.strip()
