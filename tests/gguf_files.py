"""Real GGUF files for tests: small ones from gguf.GGUFWriter, copies of the bundled
models with some metadata changed, and hand-packed headers for damaged files."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from app.core.models.gguf import ValueType, read_header

MetadataValue = str | int | float | bool | Sequence[Any]


def _default_tensors() -> dict[str, np.ndarray]:
    return {"token_embd.weight": np.ones((4, 8), dtype=np.float32)}


def _add(writer: GGUFWriter, key: str, value: MetadataValue) -> None:
    if key == "general.alignment" and isinstance(value, int):
        writer.add_custom_alignment(value)  # also pads the data to it
    elif isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        if 0 <= value < 2**32:
            writer.add_uint32(key, value)
        else:
            writer.add_int64(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        # add_string() drops empty strings; a test may want one.
        writer.add_key_value(key, value, GGUFValueType.STRING)
    else:
        writer.add_array(key, list(value))


def _writer(
    path: Path,
    arch: str,
    metadata: Mapping[str, MetadataValue] | None,
    vocab_size: int,
    tensors: Mapping[str, np.ndarray] | None,
    **options: Any,
) -> GGUFWriter:
    writer = GGUFWriter(path, arch, **options)
    for key, value in (metadata or {}).items():
        _add(writer, key, value)
    if vocab_size:
        writer.add_token_list([f"tok{i}" for i in range(vocab_size)])
        writer.add_token_scores([0.0] * vocab_size)
        writer.add_token_types([1] * vocab_size)
    for name, array in (_default_tensors() if tensors is None else tensors).items():
        writer.add_tensor(name, array)
    return writer


def _finish(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gguf(
    path: Path,
    arch: str = "llama",
    metadata: Mapping[str, MetadataValue] | None = None,
    vocab_size: int = 0,
    tensors: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """A small but real GGUF file; `metadata` values are typed from their Python type."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _finish(_writer(path, arch, metadata, vocab_size, tensors))
    return path


def tiny_model(folder: Path, name: str = "tiny-Q8_0.gguf", megabytes: int = 8,
               fill: float = 1.0) -> Path:
    """A real GGUF file of about ``megabytes`` with a vocabulary in its header (what the
    Hub's tests serve; ``fill`` makes two versions of one file differ)."""
    rows = megabytes * 1024 * 1024 // (4 * 256)
    return write_gguf(folder / name, metadata={"general.name": "Tiny",
                                               "llama.context_length": 2048},
                      vocab_size=2000,
                      tensors={"token_embd.weight": np.full((rows, 256), fill, np.float32)})


def write_split(
    path: Path,
    shards: int,
    arch: str = "llama",
    metadata: Mapping[str, MetadataValue] | None = None,
) -> list[Path]:
    """A model split llama.cpp's way into `<stem>-0000N-of-0000M.gguf`, one tensor a shard."""
    tensors = {f"blk.{i}.weight": np.full((2, 8), i, dtype=np.float32) for i in range(shards)}
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = _writer(path, arch, metadata, 0, tensors, split_max_tensors=1)
    _finish(writer)
    return [
        path.with_name(f"{path.stem}-{i:05d}-of-{shards:05d}.gguf") for i in range(1, shards + 1)
    ]


def _pack_string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _pack_value(value: str | int | float | bool, vtype: ValueType | None) -> bytes:
    if isinstance(value, str):
        return struct.pack("<I", ValueType.STRING) + _pack_string(value)
    if vtype is None or vtype in (ValueType.STRING, ValueType.ARRAY):
        if isinstance(value, bool):
            vtype = ValueType.BOOL
        elif isinstance(value, float):
            vtype = ValueType.FLOAT32
        else:
            vtype = ValueType.UINT32 if 0 <= value < 2**32 else ValueType.INT64
    code = {
        ValueType.UINT8: "B", ValueType.INT8: "b", ValueType.UINT16: "H",
        ValueType.INT16: "h", ValueType.UINT32: "I", ValueType.INT32: "i",
        ValueType.FLOAT32: "f", ValueType.BOOL: "?", ValueType.UINT64: "Q",
        ValueType.INT64: "q", ValueType.FLOAT64: "d",
    }[vtype]  # fmt: skip
    return struct.pack(f"<I{code}", vtype, value)


def copy_with_metadata(
    src: Path, dst: Path, changes: Mapping[str, str | int | float | bool | None]
) -> Path:
    """Copy a GGUF file with some metadata keys replaced, added (at the end) or removed (None).

    The header is rebuilt from the source's raw bytes and the tensor data copied as is:
    tensor offsets are relative to the data section, so they stay valid.
    """
    header = read_header(src)
    kv = bytearray()
    count = 0
    with src.open("rb") as source:
        for key, (start, end) in header.kv_spans.items():
            if key in changes:
                new = changes[key]
                if new is None:
                    continue
                old = header.metadata[key]
                old_type = None if isinstance(old, str) else _scalar_type(source, start, key)
                kv += _pack_string(key) + _pack_value(new, old_type)
            else:
                source.seek(start)
                kv += source.read(end - start)
            count += 1
        for key, new in changes.items():
            if key not in header.kv_spans and new is not None:
                kv += _pack_string(key) + _pack_value(new, None)
                count += 1
        source.seek(header.tensor_info_span[0])
        tensor_infos = source.read(header.tensor_info_span[1] - header.tensor_info_span[0])

        alignment = changes.get("general.alignment", header.alignment)
        assert isinstance(alignment, int)
        prefix = pack_preamble(header.version, len(header.tensors), count) + bytes(kv)
        prefix += tensor_infos
        prefix += b"\0" * (-len(prefix) % alignment)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with dst.open("wb") as out:
            out.write(prefix)
            source.seek(header.data_offset)
            shutil.copyfileobj(source, out, 1 << 20)
    return dst


def _scalar_type(source: Any, kv_start: int, key: str) -> ValueType:
    source.seek(kv_start + 8 + len(key.encode()))
    return ValueType(struct.unpack("<I", source.read(4))[0])


# Hand-packed pieces for damaged and hostile headers.


def pack_preamble(version: int = 3, n_tensors: int = 0, n_kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def pack_kv(key: str, value: str | int | bool | float, vtype: ValueType | None = None) -> bytes:
    """One metadata entry; ints are UINT32 unless `vtype` says otherwise."""
    return _pack_string(key) + _pack_value(value, vtype)


def pack_raw_kv(key: str, vtype: int, payload: bytes) -> bytes:
    """An entry with any type code and payload, for lengths and types no writer would produce."""
    return _pack_string(key) + struct.pack("<I", vtype) + payload
