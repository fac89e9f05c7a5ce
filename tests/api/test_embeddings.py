"""``/v1/embeddings`` through the official ``openai`` client: vectors from the bundled
embedding model, in its own context, beside a chat model that keeps answering the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from app.api.server import LocalServer
from app.core import settings
from app.core.fireside import Fireside
from tests.model_server import free_port


@pytest.fixture
def server(smollm2_path: Path, minilm_path: Path) -> Iterator[LocalServer]:
    prefs = settings.load().settings
    prefs.temperature, prefs.seed = 0.0, 1
    core = Fireside.open(prefs=prefs)
    core.load(smollm2_path).result()
    served = LocalServer(core, free_port())
    served.start()
    yield served
    served.stop()
    core.close()


def client(server: LocalServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)


def ask(server: LocalServer) -> str:
    reply = client(server).chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=16)
    return reply.choices[0].message.content or ""


@pytest.mark.model
def test_embeddings_through_the_openai_client_rank_meaning(server: LocalServer) -> None:
    before = ask(server)
    texts = ["The cat sat on the mat.", "A kitten rested on the rug.",
             "Quarterly revenue rose by four percent."]
    answer = client(server).embeddings.create(model="any", input=texts)  # base64 by default
    vectors = np.array([d.embedding for d in answer.data])
    assert vectors.shape == (3, 384) and [d.index for d in answer.data] == [0, 1, 2]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert answer.model.startswith("all-MiniLM-L6-v2") and answer.usage.prompt_tokens > 10
    floats = client(server).embeddings.create(model="any", input=texts[0],
                                              encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0], atol=1e-5)
    assert ask(server) == before  # the chat model and its sequence were not touched


@pytest.mark.model
def test_bad_embedding_requests_are_refused_with_the_reason(server: LocalServer) -> None:
    with pytest.raises(openai.BadRequestError, match="token arrays are not taken"):
        client(server).embeddings.create(model="any", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="non-empty list"):
        client(server).embeddings.create(model="any", input=[])
    with pytest.raises(openai.BadRequestError, match="gives 384 dimensions, not 128"):
        client(server).embeddings.create(model="any", input="text", dimensions=128)
