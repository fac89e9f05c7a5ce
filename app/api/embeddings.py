"""``POST /v1/embeddings`` in OpenAI's shape: vectors from the embedding model Fireside
searches documents with, in its own llama.cpp context (the chat model is not touched)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from app.core.conversations.completions import ApiError
from app.core.documents.shelf import Embedded

MAX_INPUTS = 2048  # OpenAI's own bound on one request's inputs


def read_inputs(body: Any) -> tuple[list[str], str]:
    """The texts to embed and the encoding asked ("float" or "base64"); ApiError (400)
    naming what is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts:
        raise ApiError(400, "'input' must be a string or a non-empty list of strings.",
                       param="input")
    if len(texts) > MAX_INPUTS:
        raise ApiError(400, f"'input' holds {len(texts):,} items; at most {MAX_INPUTS:,} "
                            "are taken at once.", param="input")
    if not all(isinstance(t, str) for t in texts):
        raise ApiError(400, "'input' must hold strings: token arrays are not taken.",
                       param="input")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be 'float' or 'base64'.",
                       param="encoding_format")
    return texts, encoding


def answer(embedded: Embedded, encoding: str, dimensions: Any = None) -> dict[str, Any]:
    size = embedded.vectors.shape[1] if embedded.vectors.ndim == 2 else 0
    if dimensions is not None and dimensions != size:
        raise ApiError(400, f"This embedding model ({embedded.model}) gives {size} "
                            f"dimensions, not {dimensions}.", param="dimensions")
    return {"object": "list", "model": embedded.model,
            "data": [{"object": "embedding", "index": i, "embedding": _encoded(row, encoding)}
                     for i, row in enumerate(embedded.vectors)],
            "usage": {"prompt_tokens": embedded.tokens, "total_tokens": embedded.tokens}}


def _encoded(row: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # what the openai client asks for by default
        return base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in row]
