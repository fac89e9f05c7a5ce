"""Finding passages by meaning and by words together.

Each way ranks the passages on its own: the vectors by cosine to the question's vector,
FTS5 by BM25 over the words. Reciprocal rank fusion merges the two lists by rank alone
(1 / (K + rank), summed), so neither score's scale has to be matched to the other's: a
passage both ways rank high comes first, and an exact name or number that only the
words find still makes it in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.documents.index import DocumentIndex, Found

RRF_K = 60  # the constant of the original paper; flattens the weight of the top ranks
CANDIDATES = 50  # taken from each ranking before they are merged


def by_meaning(ids: np.ndarray, vectors: np.ndarray, query: np.ndarray,
               limit: int) -> list[int]:
    """The ids of the ``limit`` rows nearest ``query`` (rows and query unit length)."""
    if len(ids) == 0:
        return []
    scores = vectors @ query.astype(np.float32)
    if len(scores) > limit:
        top = np.argpartition(-scores, limit - 1)[:limit]
    else:
        top = np.arange(len(scores))
    return [int(ids[i]) for i in top[np.argsort(-scores[top], kind="stable")]]


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """Reciprocal rank fusion of several rankings, best first (ties: first seen)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, passage in enumerate(ranking):
            scores[passage] = scores.get(passage, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda p: -scores[p])


def hybrid(index: DocumentIndex, collection_ids: Sequence[int], question: str, *,
           query: np.ndarray | None, model: str, limit: int) -> list[Found]:
    """The passages of these collections that best answer ``question``, best first.
    Without a vector (no embedding model to hand) the words alone rank them."""
    rankings = [index.by_words(question, collection_ids, CANDIDATES)]
    if query is not None:
        ids, vectors = index.matrix(collection_ids, model)
        rankings.insert(0, by_meaning(ids, vectors, query, CANDIDATES))
    return index.found(fuse(rankings)[:limit])
