"""Reads the header of a GGUF model file: metadata, tensor list, where the weights start.

It is fast because large arrays (a 262k-token vocabulary) are skipped, not decoded:
only their element type and length are kept. Every length is checked against the
bytes left in the file before anything is read, so a damaged or hostile header is
refused with `GGUFError` instead of exhausting memory. The file is read in chunks,
not memory-mapped: a file truncated by a download in progress must not crash the
app with SIGBUS.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses tensors with more
SMALL_ARRAY = 64  # arrays up to this length keep their values
MAX_TEXT = 16 << 20  # a single decoded string; real chat templates are < 100 KB
_CHUNK = 1 << 20


class GGUFError(Exception):
    """The file cannot be used as a GGUF model; the message is a short reason for people."""

    def __init__(self, reason: str, path: Path | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALARS: dict[int, str] = {
    ValueType.UINT8: "B",
    ValueType.INT8: "b",
    ValueType.UINT16: "H",
    ValueType.INT16: "h",
    ValueType.UINT32: "I",
    ValueType.INT32: "i",
    ValueType.FLOAT32: "f",
    ValueType.BOOL: "?",
    ValueType.UINT64: "Q",
    ValueType.INT64: "q",
    ValueType.FLOAT64: "d",
}
_STRUCTS = {vtype: struct.Struct("<" + code) for vtype, code in _SCALARS.items()}
_U32 = _STRUCTS[ValueType.UINT32]
_U64 = _STRUCTS[ValueType.UINT64]

# ggml_type -> (name, elements per block, bytes per block), from the ggml.h / ggml.c
# that llama-cpp-python 0.3.36 is built from.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

# llama_ftype (general.file_type) -> name, from the same llama.h. Unknown values fall
# back to the tensor type that holds most weights.
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    4: "Q4_1_SOME_F16",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    33: "Q4_0_4_4",
    34: "Q4_0_4_8",
    35: "Q4_0_8_8",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    41: "Q2_0",
}

# Magic bytes of things people save as .gguf by mistake.
_NOT_GGUF_HINTS: dict[bytes, str] = {
    b"lmgg": "an old GGML model; convert it to GGUF",
    b"fmgg": "an old GGML model; convert it to GGUF",
    b"tjgg": "an old GGML model; convert it to GGUF",
    b"vers": "a Git LFS pointer; the model itself was not downloaded",
    b"<!DO": "a web page, not a model",
    b"<htm": "a web page, not a model",
    b"PK\x03\x04": "a zip archive",
}

Scalar = int | float | bool | str


@dataclass(frozen=True, slots=True)
class ArrayInfo:
    """An array value: element type, length, and the values when the array is small."""

    type: ValueType
    length: int
    values: list[Scalar] | None = None


MetaValue = Scalar | ArrayInfo


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    type: int  # ggml_type
    offset: int  # relative to GGUFHeader.data_offset

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def type_name(self) -> str:
        known = GGML_TYPES.get(self.type)
        return known[0] if known else f"type {self.type}"

    @property
    def nbytes(self) -> int | None:
        """Size of the weights in the file, or None for a type this table does not know."""
        known = GGML_TYPES.get(self.type)
        if known is None:
            return None
        _, block, size = known
        return self.n_elements // block * size


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, MetaValue]
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int  # where the tensor data starts
    file_size: int
    # Byte ranges in the file, so a copy can be written with a few keys changed.
    kv_spans: dict[str, tuple[int, int]]
    tensor_info_span: tuple[int, int]

    def text(self, key: str) -> str | None:
        value = self.metadata.get(key)
        return value if isinstance(value, str) else None

    def integer(self, key: str) -> int | None:
        """An integer value; for a per-layer array, its largest element."""
        value = self.metadata.get(key)
        if isinstance(value, ArrayInfo):
            ints = [v for v in value.values or () if isinstance(v, int) and not isinstance(v, bool)]
            return max(ints) if ints else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return None

    def arch_integer(self, suffix: str) -> int | None:
        """`{architecture}.{suffix}`, e.g. arch_integer("context_length")."""
        arch = self.architecture
        return self.integer(f"{arch}.{suffix}") if arch else None

    @property
    def architecture(self) -> str | None:
        return self.text("general.architecture")

    @property
    def name(self) -> str | None:
        name = (self.text("general.name") or "").strip()
        return name or None

    @property
    def model_type(self) -> str | None:
        """general.type: "model", "adapter", "mmproj"... (absent in most files)."""
        return self.text("general.type")

    @property
    def context_length(self) -> int | None:
        return self.arch_integer("context_length")

    @property
    def block_count(self) -> int | None:
        return self.arch_integer("block_count")

    @property
    def embedding_length(self) -> int | None:
        return self.arch_integer("embedding_length")

    @property
    def head_count(self) -> int | None:
        return self.arch_integer("attention.head_count")

    @property
    def head_count_kv(self) -> int | None:
        """KV heads; llama.cpp uses head_count when the file does not say."""
        return self.arch_integer("attention.head_count_kv") or self.head_count

    @property
    def key_length(self) -> int | None:
        """Per-head key size; llama.cpp derives it from the embedding when absent."""
        explicit = self.arch_integer("attention.key_length")
        if explicit:
            return explicit
        embd, heads = self.embedding_length, self.head_count
        return embd // heads if embd and heads else None

    @property
    def value_length(self) -> int | None:
        return self.arch_integer("attention.value_length") or self.key_length

    @property
    def sliding_window(self) -> int | None:
        return self.arch_integer("attention.sliding_window")

    @property
    def has_chat_template(self) -> bool:
        return bool(self.text("tokenizer.chat_template"))

    @property
    def vocab_size(self) -> int | None:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        return tokens.length if isinstance(tokens, ArrayInfo) else None

    @property
    def file_type(self) -> int | None:
        return self.integer("general.file_type")

    @property
    def quantization(self) -> str | None:
        return quantization_name(self.file_type, self.tensors)

    @property
    def parameter_count(self) -> int | None:
        """general.parameter_count, else the elements of the tensors listed."""
        declared = self.integer("general.parameter_count")
        if declared and declared > 0:
            return declared
        return sum(t.n_elements for t in self.tensors) or None

    @property
    def size_label(self) -> str | None:
        label = self.text("general.size_label")
        if label and label.strip():
            return label.strip()
        count = self.parameter_count
        return format_size_label(count) if count else None


def quantization_name(file_type: int | None, tensors: Sequence[TensorInfo]) -> str | None:
    """Q4_K_M-style name from general.file_type, else the type holding most weights."""
    if file_type is not None and file_type in FILE_TYPES:
        return FILE_TYPES[file_type]
    # Norms and biases are 1-D and usually F32 whatever the quantization.
    weights = [t for t in tensors if len(t.shape) >= 2] or list(tensors)
    totals: dict[str, int] = {}
    for tensor in weights:
        totals[tensor.type_name] = totals.get(tensor.type_name, 0) + tensor.n_elements
    return max(totals, key=lambda name: totals[name]) if totals else None


def format_size_label(count: int) -> str:
    """135M, 1.5B, 27B: at least two significant digits, like llama.cpp's converter."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= scale:
            scaled = count / scale
            decimals = max(2 - len(str(round(scaled))), 0)
            return f"{scaled:.{decimals}f}{suffix}"
    return str(count)


# Headers are immutable: re-reading an unchanged file (same inode, size and mtime) is
# skipped, so checking a model again on every switch costs one stat().
_CACHE_SIZE = 64
_cache: dict[Path, tuple[tuple[int, int, int, int], GGUFHeader]] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every header read so far (the next read parses the file again)."""
    with _cache_lock:
        _cache.clear()


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read the metadata and tensor list of a GGUF v2/v3 file; GGUFError if unusable."""
    path = Path(path)
    if "\0" in str(path):
        raise GGUFError("invalid file name", path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise GGUFError("is a directory", path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the open below
            raise GGUFError("is not a regular file", path)
        if info.st_size == 0:
            raise GGUFError("empty file", path)
        signature = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with _cache_lock:
            cached = _cache.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        with path.open("rb") as file:
            header = _Parser(file, os.fstat(file.fileno()).st_size).parse(path)
        with _cache_lock:
            if len(_cache) >= _CACHE_SIZE:
                _cache.pop(next(iter(_cache)))
            _cache[path] = (signature, header)
        return header
    except GGUFError as error:
        error.path = path
        raise
    except (FileNotFoundError, NotADirectoryError):
        raise GGUFError("file not found", path) from None
    except PermissionError:
        raise GGUFError("permission denied", path) from None
    except OSError as error:
        raise GGUFError(f"cannot be read: {error.strerror or error}", path) from None


def _truncated(what: str) -> GGUFError:
    return GGUFError(f"file is truncated or damaged: {what} runs past the end of the file")


class _Parser:
    """A cursor over the file that loads a window of bytes at a time."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self._size = size
        self._buf = b""
        self._base = 0  # file offset of _buf[0]
        self.pos = 0

    def _window(self, n: int, what: str) -> int:
        """Make bytes [pos, pos + n) readable; return their index in the buffer."""
        start = self.pos - self._base
        if start + n <= len(self._buf):
            return start
        self._need(n, what)
        self._file.seek(self.pos)
        self._buf = self._file.read(max(n, _CHUNK))
        self._base = self.pos
        if len(self._buf) < n:  # the file shrank while being read
            raise _truncated(what)
        return 0

    def _need(self, n: int, what: str) -> None:
        if n > self._size - self.pos:
            raise _truncated(what)

    def _scalar(self, vtype: int, what: str) -> Scalar:
        st = _STRUCTS[vtype]
        at = self._window(st.size, what)
        self.pos += st.size
        value: Scalar = st.unpack_from(self._buf, at)[0]
        return value

    def _u32(self, what: str) -> int:
        at = self._window(4, what)
        self.pos += 4
        value: int = _U32.unpack_from(self._buf, at)[0]
        return value

    def _u64(self, what: str) -> int:
        at = self._window(8, what)
        self.pos += 8
        value: int = _U64.unpack_from(self._buf, at)[0]
        return value

    def _string(self, what: str) -> str:
        n = self._u64(what)
        if n > MAX_TEXT:
            self._need(n, what)
            raise GGUFError(f"damaged header: {what} is {n:,} bytes long")
        at = self._window(n, what)
        self.pos += n
        return self._buf[at : at + n].decode("utf-8", errors="replace")

    def _skip_strings(self, count: int, what: str) -> None:
        # The hot loop of the reader: a 262k-token vocabulary is walked here, so it
        # carries no bounds checks; unpack_from failing marks the end of the window.
        unpack = _U64.unpack_from
        left = count
        while left:
            at = self._window(8, what)
            buf, base = self._buf, self._base
            done = 0
            try:
                for done in range(left):  # noqa: B007 - `done` counts the strings walked
                    at += 8 + unpack(buf, at)[0]
                done = left
            except (struct.error, OverflowError):
                pass  # the next length lies beyond the loaded bytes (or the file)
            left -= done
            self.pos = base + at
        self._need(0, what)

    def _array(self, key: str) -> ArrayInfo:
        what = f"array {key!r}"
        etype = self._u32(what)
        length = self._u64(what)
        if etype == ValueType.STRING:
            self._need(length * 8, what)  # each element has at least its 8-byte length
            if length <= SMALL_ARRAY:
                return ArrayInfo(
                    ValueType.STRING, length, [self._string(what) for _ in range(length)]
                )
            self._skip_strings(length, what)
            return ArrayInfo(ValueType.STRING, length)
        code = _SCALARS.get(etype)
        if code is None:
            raise GGUFError(
                f"damaged header: array {key!r} has elements of unsupported type {etype}"
            )
        nbytes = length * _STRUCTS[etype].size
        self._need(nbytes, what)
        values: list[Scalar] | None = None
        if length <= SMALL_ARRAY:
            at = self._window(nbytes, what)
            values = list(struct.unpack_from(f"<{length}{code}", self._buf, at))
        self.pos += nbytes
        return ArrayInfo(ValueType(etype), length, values)

    def _value(self, vtype: int, key: str) -> MetaValue:
        if vtype in _STRUCTS:
            return self._scalar(vtype, f"value of {key!r}")
        if vtype == ValueType.STRING:
            return self._string(f"value of {key!r}")
        if vtype == ValueType.ARRAY:
            return self._array(key)
        raise GGUFError(f"damaged header: {key!r} has unknown value type {vtype}")

    def _preamble(self) -> tuple[int, int, int]:
        at = self._window(min(self._size, 24), "header")
        head = self._buf[at : at + 24]
        if head[:4] != MAGIC:
            hint = _NOT_GGUF_HINTS.get(head[:4])
            raise GGUFError(f"not a GGUF file ({hint})" if hint else "not a GGUF file")
        if len(head) < 24:
            raise GGUFError("file is truncated")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
        if version not in (2, 3):
            if int.from_bytes(head[4:8], "big") in (2, 3):
                raise GGUFError("big-endian GGUF files are not supported")
            if version == 1:
                raise GGUFError("GGUF version 1 is too old; convert the model again")
            raise GGUFError(f"unsupported GGUF version {version}")
        self.pos = 24
        # Smallest possible entries: key length + type + 1-byte value; name length +
        # n_dims + type + offset. Refuse counts the file cannot hold before looping.
        self._need(
            n_kv * 13 + n_tensors * 24,
            f"a header of {n_kv:,} metadata entries and {n_tensors:,} tensors",
        )
        return version, n_tensors, n_kv

    def parse(self, path: Path) -> GGUFHeader:
        version, n_tensors, n_kv = self._preamble()

        metadata: dict[str, MetaValue] = {}
        spans: dict[str, tuple[int, int]] = {}
        for _ in range(n_kv):
            start = self.pos
            key = self._string("metadata key")
            if key in metadata:
                raise GGUFError(f"damaged header: key {key!r} appears twice")
            metadata[key] = self._value(self._u32(f"type of {key!r}"), key)
            spans[key] = (start, self.pos)

        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(alignment, int)
            or isinstance(alignment, bool)
            or alignment <= 0
            or alignment & (alignment - 1)
        ):
            raise GGUFError("damaged header: general.alignment is not a power of two")

        tensors_start = self.pos
        tensors: list[TensorInfo] = []
        names: set[str] = set()
        for _ in range(n_tensors):
            name = self._string("tensor name")
            n_dims = self._u32(f"tensor {name!r}")
            if n_dims > MAX_DIMS:
                raise GGUFError(
                    f"damaged header: tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})"
                )
            at = self._window(8 * n_dims + 12, f"tensor {name!r}")
            *shape, ggml_type, offset = struct.unpack_from(f"<{n_dims}QIQ", self._buf, at)
            self.pos += 8 * n_dims + 12
            if name in names:
                raise GGUFError(f"damaged header: tensor {name!r} appears twice")
            names.add(name)
            tensors.append(TensorInfo(name, tuple(shape), ggml_type, offset))
        tensors_end = self.pos

        data_offset = -(-tensors_end // alignment) * alignment
        data_end = max((t.offset + (t.nbytes or 0) for t in tensors), default=0)
        if tensors and data_offset + data_end > self._size:
            raise GGUFError(
                f"file is truncated: it has {self._size:,} of the {data_offset + data_end:,} "
                "bytes its weights need (an unfinished download?)"
            )
        return GGUFHeader(
            path=path,
            version=version,
            metadata=metadata,
            tensors=tensors,
            alignment=alignment,
            data_offset=data_offset,
            file_size=self._size,
            kv_spans=spans,
            tensor_info_span=(tensors_start, tensors_end),
        )
