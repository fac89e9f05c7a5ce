"""Which models may draft for another, told from the headers of real files: the bundled
models and small files written with SmolLM2's vocabulary in their headers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from app.core import settings
from app.core.models import catalog
from app.core.models.bundled import bundled_dir
from app.core.models.drafts import choose_draft, draft_candidates, draft_refusal
from app.core.models.gguf import GGUFHeader, read_header
from tests.gguf_files import MetadataValue, write_gguf

SMOLLM2_VOCABULARY: dict[str, MetadataValue] = {
    "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
    "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
SMOLLM2_TOKENS = 49_152


def small_model(folder: Path, name: str = "SmolLM2 Draft", tokens: int = SMOLLM2_TOKENS,
                changes: Mapping[str, MetadataValue | None] | None = None) -> Path:
    """A small file (a few thousand parameters) whose header has SmolLM2's vocabulary,
    less or more what ``changes`` says (None: the key left out)."""
    metadata = {"general.name": name, "llama.context_length": 2048, **SMOLLM2_VOCABULARY,
                **(changes or {})}
    return write_gguf(folder / f"{name.replace(' ', '-')}.gguf", vocab_size=tokens,
                      metadata={k: v for k, v in metadata.items() if v is not None})


def header(path: Path) -> GGUFHeader:
    return read_header(path)


def test_a_model_may_draft_for_itself_when_asked_by_its_own_file(
        smollm2_path: Path, gemma_path: Path) -> None:
    for path in (smollm2_path, gemma_path):
        assert draft_refusal(header(path), header(path)) is None


def test_the_bundled_models_cannot_draft_for_each_other_their_vocabularies_differ(
        smollm2_path: Path, gemma_path: Path) -> None:
    smollm2, gemma = header(smollm2_path), header(gemma_path)
    assert draft_refusal(smollm2, gemma) == (
        "Gemma 3 270M cannot draft for SmolLM2-135M-Instruct: their vocabularies differ "
        "(llama tokenizer against gpt2).")
    refused = draft_refusal(gemma, smollm2)
    assert refused is not None
    assert refused.startswith("SmolLM2-135M-Instruct cannot draft for Gemma 3 270M: their "
                              "vocabularies differ (gpt2 tokenizer against llama)")


def test_only_a_smaller_model_drafts_a_copy_of_the_same_size_does_not(
        smollm2_path: Path, thinking_model_path: Path, tmp_path: Path) -> None:
    smollm2, small = header(smollm2_path), header(small_model(tmp_path))
    assert draft_refusal(smollm2, small) is None
    larger = draft_refusal(small, smollm2)
    assert larger is not None and "SmolLM2-135M-Instruct cannot draft for SmolLM2 Draft: " \
        "it is no smaller (135M, " in larger
    # The same weights in another file save nothing: only the model's own file is let
    # through (asked for by hand; never offered).
    copy = draft_refusal(smollm2, header(thinking_model_path))
    assert copy is not None and "no smaller" in copy


@pytest.mark.parametrize(("tokens", "changes", "why"), [
    (SMOLLM2_TOKENS + 64, {}, None),  # a vocabulary padded to a round size
    (SMOLLM2_TOKENS + 200, {}, "49,352 tokens against 49,152"),
    (SMOLLM2_TOKENS, {"tokenizer.ggml.pre": "llama-bpe"}, "pre-tokenizer llama-bpe against smollm"),
    (SMOLLM2_TOKENS, {"tokenizer.ggml.pre": None}, None),  # said by one of them only
    (SMOLLM2_TOKENS, {"tokenizer.ggml.eos_token_id": 0}, "end token 0 against 2"),
    (SMOLLM2_TOKENS, {"tokenizer.ggml.bos_token_id": 5}, "start token 5 against 1"),
    (SMOLLM2_TOKENS, {"tokenizer.ggml.bos_token_id": None}, None),
    (SMOLLM2_TOKENS, {"tokenizer.ggml.model": None}, "a file with no vocabulary in it"),
])
def test_each_difference_in_the_vocabulary_is_named(
        smollm2_path: Path, tmp_path: Path, tokens: int,
        changes: dict[str, MetadataValue | None], why: str | None) -> None:
    refused = draft_refusal(header(smollm2_path),
                            header(small_model(tmp_path, tokens=tokens, changes=changes)))
    if why is None:
        assert refused is None
    else:
        assert refused == ("SmolLM2 Draft cannot draft for SmolLM2-135M-Instruct: their "
                           f"vocabularies differ ({why}).")


def test_an_embedding_model_never_drafts(smollm2_path: Path, tmp_path: Path) -> None:
    embedding = small_model(tmp_path, "SmolLM2 Embedding",
                            changes={"llama.pooling_type": 1})
    refused = draft_refusal(header(smollm2_path), header(embedding))
    assert refused is not None and "embedding model" in refused


def entries_with(folder: Path) -> list[catalog.ModelEntry]:
    """The bundled models and those in ``folder``, as the catalog finds them."""
    return catalog.scan([(bundled_dir(), catalog.BUNDLED), (folder, catalog.COMMAND_LINE)])


def test_the_candidates_are_the_smaller_models_of_the_same_vocabulary(
        smollm2_path: Path, gemma_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    draft = small_model(folder)
    small_model(folder, "SmolLM2 Embedding", changes={"llama.pooling_type": 1})
    small_model(folder, "Other Draft", changes={"tokenizer.ggml.pre": "llama-bpe"})
    entries = entries_with(folder)
    assert [e.path for e in draft_candidates(smollm2_path, entries)] == [draft]
    assert draft_candidates(gemma_path, entries) == []  # SmolLM2 is smaller, but not its kind
    assert draft_candidates(draft, entries) == []  # nothing smaller than the smallest
    assert draft_candidates(tmp_path / "gone.gguf", entries) == []


def test_a_draft_named_in_the_terminal_is_found_or_refused_with_the_reason(
        smollm2_path: Path, gemma_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    draft = small_model(folder)
    (folder / "notes.gguf").write_text("not a model", encoding="utf-8")
    entries = entries_with(folder)
    assert choose_draft("SmolLM2 Draft", smollm2_path, entries) == draft
    assert choose_draft(str(draft), smollm2_path, entries) == draft
    assert choose_draft(str(smollm2_path), smollm2_path, entries) == smollm2_path
    for query, said in ((str(folder / "missing.gguf"), "missing.gguf cannot draft: "),
                        (str(folder / "notes.gguf"), "notes.gguf cannot draft: "),
                        ("Nonesuch", "No model called 'Nonesuch' to draft with."),
                        (str(gemma_path), "their vocabularies differ")):
        with pytest.raises(LookupError, match=said):
            choose_draft(query, smollm2_path, entries)


def test_a_models_draft_model_is_kept_in_the_settings_file(tmp_path: Path) -> None:
    prefs, model, draft = settings.Settings(), tmp_path / "model.gguf", tmp_path / "draft.gguf"
    prefs.set_model_value(model, "draft_model", str(draft))
    settings.save(prefs, tmp_path / "settings.json")
    loaded = settings.load(tmp_path / "settings.json")
    assert loaded.problem is None
    assert loaded.settings.load_options(model).draft_model == str(draft)
    assert loaded.settings.load_options(tmp_path / "other.gguf").draft_model is None
