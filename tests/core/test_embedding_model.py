"""The bundled embedding model's conversion to GGUF: its header, and vectors that agree
with all-MiniLM-L6-v2 itself (a plain numpy BERT on the original weights)."""

from __future__ import annotations

import math
import unicodedata
import zipfile
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from app.core.models import embedding_model, minilm
from app.core.models.gguf import read_header

pytestmark = pytest.mark.model  # the bundled embedding model, made by set-up

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Fireside keeps every conversation on this computer; nothing is sent anywhere.",
    "Un café, s'il vous plaît! Ångström measured the SPECTRUM of the Sun in 1868.",
    "GPU offload: 28/32 layers (Q4_K_M) at 8,192 tokens -- about 4.1 GB.",
    "unaffable",
    "",
]


@pytest.fixture(scope="module")
def original() -> zipfile.ZipFile:
    archive = minilm.package_zip()
    if archive is None:
        pytest.fail(f"the {minilm.PACKAGE} package is missing; run `make setup`")
    return zipfile.ZipFile(archive)


def test_the_header_is_a_mean_pooled_384_dimension_bert(minilm_path: Path) -> None:
    header = read_header(minilm_path)
    assert minilm_path.parent.name == "embedding"
    assert (header.architecture, header.pooling_type, header.embedding_length) == ("bert", 1, 384)
    assert (header.context_length, header.block_count, header.head_count) == (512, 6, 12)
    assert header.text("tokenizer.ggml.model") == "bert" and header.vocab_size == 30522
    assert header.metadata["bert.attention.causal"] is False
    assert header.quantization == "F16"
    types = {t.name: t.type_name for t in header.tensors}
    assert types["token_embd.weight"] == types["blk.0.attn_q.weight"] == "F16"
    # ggml takes these in F32 only.
    assert types["position_embd.weight"] == types["token_types.weight"] == "F32"
    assert {types[t.name] for t in header.tensors if len(t.shape) == 1} == {"F32"}
    notice = (minilm_path.parent / minilm.NOTICE_NAME).read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in notice and "sentence-transformers" in notice


def test_vectors_agree_with_the_original_model(minilm_path: Path,
                                                original: zipfile.ZipFile) -> None:
    from safetensors.numpy import load

    weights = {k: v.astype(np.float64) for k, v in load(original.read("model.safetensors"))
               .items()}
    vocab = {line: i for i, line in enumerate(_vocabulary(original))}
    llm = llama_cpp.Llama(str(minilm_path), embedding=True, verbose=False)
    try:
        for sentence in SENTENCES:
            ids = _wordpiece(sentence, vocab)
            # The GGUF's vocabulary tokenizes as BERT's own tokenizer does.
            assert llm.tokenize(sentence.encode(), add_bos=True) == ids, sentence
            expected = _bert(weights, ids)
            got = np.asarray(llm.embed(sentence, normalize=True))
            assert float(got @ expected) >= 0.999, sentence
    finally:
        llm.close()


def test_install_converts_once_and_whole(tmp_path: Path) -> None:
    target = embedding_model.install(tmp_path)
    assert target == tmp_path / embedding_model.EMBEDDING_MODEL_FILE
    first = target.stat()
    assert embedding_model.install(tmp_path) == target
    assert target.stat().st_ino == first.st_ino  # kept, not written again
    with target.open("r+b") as file:  # a copy cut short is converted again
        file.truncate(first.st_size // 2)
    assert embedding_model.install(tmp_path) == target
    assert target.stat().st_size == first.st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [embedding_model.EMBEDDING_MODEL_FILE, minilm.NOTICE_NAME])


def test_without_the_package_nothing_is_installed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "package_zip", lambda: None)
    assert embedding_model.install(tmp_path / "embedding") is None
    assert not (tmp_path / "embedding").exists()


# --- all-MiniLM-L6-v2 in numpy --------------------------------------------------------


def _vocabulary(original: zipfile.ZipFile) -> list[str]:
    import json

    vocab: dict[str, int] = json.loads(original.read("tokenizer.json"))["model"]["vocab"]
    return sorted(vocab, key=vocab.__getitem__)


def _wordpiece(text: str, vocab: dict[str, int]) -> list[int]:
    """BERT's uncased tokenizer: clean, lowercase, strip accents, split punctuation, then
    the longest pieces of the vocabulary from the left."""
    text = "".join(" " if c.isspace() else c for c in text
                   if not unicodedata.category(c).startswith("C"))
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    words: list[str] = []
    for chunk in text.split():
        current = ""
        for char in chunk:
            code = ord(char)
            punctuation = (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96
                           or 123 <= code <= 126 or unicodedata.category(char).startswith("P"))
            if punctuation:
                words += [w for w in (current, char) if w]
                current = ""
            else:
                current += char
        if current:
            words.append(current)
    ids = [vocab["[CLS]"]]
    for word in words:
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    pieces.append(vocab[piece])
                    break
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            start = end
        ids += pieces
    return [*ids, vocab["[SEP]"]]


def _bert(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """The sentence-transformers pipeline: BERT, mean pooling, unit length."""
    heads, n = 12, len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _norm(x, w, "embeddings.LayerNorm")
    for layer in range(6):
        p = f"encoder.layer.{layer}."

        def dense(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (dense(x, f"attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attended = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        x = _norm(x + dense(attended.transpose(1, 0, 2).reshape(n, -1),
                            "attention.output.dense"), w, p + "attention.output.LayerNorm")
        hidden = _gelu(dense(x, "intermediate.dense"))
        x = _norm(x + dense(hidden, "output.dense"), w, p + "output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    centred = x - x.mean(axis=-1, keepdims=True)
    scaled = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + 1e-12)
    return scaled * w[name + ".weight"] + w[name + ".bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    # erf by Abramowitz and Stegun 7.1.26 (error below 1.5e-7): BERT's exact GELU.
    z = np.abs(x) / math.sqrt(2)
    t = 1 / (1 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                          + t * 1.061405429))))
    erf = np.sign(x) * (1 - poly * np.exp(-z * z))
    return 0.5 * x * (1 + erf)
