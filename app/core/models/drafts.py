"""Which models may draft tokens for another (speculative decoding), told from their
headers alone, without llama.cpp: the window offers only these, and the terminal refuses
the others before loading anything. The engine compares the two vocabularies token by
token when it loads a draft model; this check keeps out the mismatches a header shows.

A draft model must be smaller than the model it drafts for (fewer parameters or fewer
bytes of weights), else checking its drafts costs more than it saves. The one exception
is the model's own file, accepted when asked for by name (it drafts what it would say,
which tests use); ``draft_candidates`` never offers it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from app.core.models import catalog
from app.core.models.catalog import ModelEntry
from app.core.models.gguf import GGUFError, GGUFHeader, format_size_label, joined
from app.core.models.header_cache import cached_header
from app.core.remote import servers

# Vocabularies padded to a round size (a multiple of 64 or 128) still share their tokens;
# llama.cpp's own speculative example allows this much difference.
VOCAB_SLACK = 128


def draft_refusal(main: GGUFHeader, draft: GGUFHeader) -> str | None:
    """None if ``draft`` may draft for ``main``; else a sentence saying why not."""
    draft_name, main_name = _name(draft), _name(main)
    if catalog.is_embedding_model(draft):
        return f"{draft_name} is an embedding model: it cannot draft for {main_name}."
    differs = _vocabulary_difference(draft, main)
    if differs:
        return (f"{draft_name} cannot draft for {main_name}: their vocabularies differ "
                f"({differs}).")
    if not _same_file(main, draft) and not _smaller(draft, main):
        return (f"{draft_name} cannot draft for {main_name}: it is no smaller "
                f"({_size(draft)} against {_size(main)}), so checking its drafts would "
                "cost more time than they save.")
    return None


def draft_candidates(main_path: Path, entries: Sequence[ModelEntry]) -> list[ModelEntry]:
    """The entries that may draft for the model at ``main_path``, in the entries' order:
    local, usable, smaller, of the same vocabulary; never the model itself."""
    main = _entry(main_path, entries)
    try:
        main_header = header_of(main)
    except GGUFError:
        return []
    found = []
    for entry in entries:
        if entry.error or entry.embedding or entry.source.startswith(catalog.SERVER_PREFIX) \
                or (entry.size_bytes >= main.size_bytes and _not_fewer(entry, main)):
            continue  # told from the entry alone: no header read
        try:
            header = header_of(entry)
        except GGUFError:
            continue
        if not _same_file(main_header, header) and draft_refusal(main_header, header) is None:
            found.append(entry)
    return found


def choose_draft(query: str, main_path: Path, entries: Sequence[ModelEntry]) -> Path:
    """The draft model a user names for the model at ``main_path`` (a path or a name,
    found as the model itself is); LookupError with a message for the user if it cannot
    draft for it, as far as the headers tell."""
    if servers.on_server(main_path) is not None:
        raise LookupError("A draft model works beside a model Fireside runs itself; "
                          f"{main_path.name} is on a server.")
    draft = catalog.find(entries, query)
    if draft is None:
        names = ", ".join(e.name for e in catalog.chat_models(entries) if not e.error)
        raise LookupError(f"No model called {query!r} to draft with. Models found: "
                          f"{names or 'none'}.")
    if draft.source.startswith(catalog.SERVER_PREFIX):
        raise LookupError(f"{draft.name} is on a server: a draft model must be a file here.")
    if draft.error:
        raise LookupError(f"{query} cannot draft: {draft.error}.")
    try:
        draft_header = header_of(draft)
    except GGUFError as err:
        raise LookupError(f"{query} cannot draft: {err.reason}.") from None
    try:
        main_header = header_of(_entry(main_path, entries))
    except GGUFError:
        return draft.path  # the model's own problem, which its load says
    refusal = draft_refusal(main_header, draft_header)
    if refusal:
        raise LookupError(refusal)
    return draft.path


def header_of(entry: ModelEntry) -> GGUFHeader:
    """The entry's header, with the tensors of every shard (from the header cache)."""
    return joined([cached_header(path) for path in entry.shards])


def _entry(path: Path, entries: Sequence[ModelEntry]) -> ModelEntry:
    return next((e for e in entries if path == e.path or path in e.shards), None) \
        or catalog.describe(path)


def _vocabulary_difference(draft: GGUFHeader, main: GGUFHeader) -> str | None:
    """How the two vocabularies differ, the draft's first ("llama tokenizer against
    gpt2"); None where the header shows no difference."""
    kinds = (draft.text("tokenizer.ggml.model"), main.text("tokenizer.ggml.model"))
    if None in kinds or draft.vocab_size is None or main.vocab_size is None:
        return "a file with no vocabulary in it"
    if kinds[0] != kinds[1]:
        return f"{kinds[0]} tokenizer against {kinds[1]}"
    pre = (draft.text("tokenizer.ggml.pre"), main.text("tokenizer.ggml.pre"))
    if None not in pre and pre[0] != pre[1]:
        return f"pre-tokenizer {pre[0]} against {pre[1]}"
    if abs(draft.vocab_size - main.vocab_size) > VOCAB_SLACK:
        return f"{draft.vocab_size:,} tokens against {main.vocab_size:,}"
    for key, what in (("bos", "start"), ("eos", "end")):
        ids = (draft.integer(f"tokenizer.ggml.{key}_token_id"),
               main.integer(f"tokenizer.ggml.{key}_token_id"))
        if None not in ids and ids[0] != ids[1]:
            return f"{what} token {ids[0]} against {ids[1]}"
    return None


def _smaller(draft: GGUFHeader, main: GGUFHeader) -> bool:
    """Fewer parameters, or fewer bytes of weights (a smaller quantization of the same
    model drafts faster than the model checks)."""
    fewer = (draft.parameter_count or 0) < (main.parameter_count or 0)
    return fewer or _weight_bytes(draft) < _weight_bytes(main)


def _not_fewer(entry: ModelEntry, main: ModelEntry) -> bool:
    return not (entry.parameter_count or 0) < (main.parameter_count or 0)


def _weight_bytes(header: GGUFHeader) -> int:
    return sum(t.nbytes or 0 for t in header.tensors) or header.file_size


def _size(header: GGUFHeader) -> str:
    """"135M, 98 MB": parameters (where the header tells them) and bytes of weights."""
    count = header.parameter_count
    megabytes = f"{_weight_bytes(header) / 1e6:,.0f} MB"
    return f"{format_size_label(count)}, {megabytes}" if count else megabytes


def _same_file(a: GGUFHeader, b: GGUFHeader) -> bool:
    try:
        return os.path.samefile(a.path, b.path)
    except (OSError, ValueError):
        return False


def _name(header: GGUFHeader) -> str:
    return catalog.display_name(header.metadata, header.path)
