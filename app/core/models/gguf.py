"""Reads the header of a GGUF model file: metadata, tensor list, where the weights start.

It is fast because large arrays (a 262k-token vocabulary) are skipped, not decoded:
only their element type and length are kept. The model list goes further and does not
even walk a vocabulary's strings (`read_header(path, exact=False)`): it finds the key
that follows and accepts that only if the whole header then fits the file exactly.
Every length is checked against the bytes left in the file before anything is read,
and counts and sizes no real model has (2^40-token contexts, a billion layers) are
refused, so a damaged or hostile header gives `GGUFError` instead of exhausting memory.
The file is read in chunks, not memory-mapped: a file truncated by a download in
progress must not crash the app with SIGBUS.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses tensors with more
SMALL_ARRAY = 64  # arrays up to this length keep their values
MAX_TEXT = 16 << 20  # a single decoded string; real chat templates are < 100 KB
_CHUNK = 64 << 10

# Limits on what a header may claim, far above any real model (largest vocabulary 262k,
# merges ~1M, tensors a few thousand) and checked before any loop runs over the claim.
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20
MAX_ARRAY = 1 << 28
MAX_ELEMENTS = (1 << 63) - 1  # ggml counts elements in an int64
# Hyperparameters llama.cpp would size buffers (or fixed arrays) from.
MAX_CONTEXT = 1 << 26  # the longest trained contexts are ~10M tokens
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp aborts beyond it
MAX_EXPERTS = 512  # LLAMA_MAX_EXPERTS
MAX_WIDTH = 1 << 20  # embedding, feed-forward, head size
MAX_HEADS = 1 << 14

# The fast reader skips a string array larger than this by finding what follows it.
_GUESS_MIN = SMALL_ARRAY
_SEARCH_CHUNK = 256 << 10
_MAX_TRIES = 64
# What a metadata key or the first tensor name after a tokenizer array starts with.
_NEXT_PREFIXES = (b"tokenizer.", b"general.", b"split.", b"token_embd.", b"blk.", b"output.",
                  b"output_norm.")


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
    def pooling_type(self) -> int | None:
        """How an embedding model pools its tokens into one vector (llama.cpp's
        ``LLAMA_POOLING_TYPE_*``: 1 mean, 2 CLS, 3 last token; 0 none, 4 rank); None in a
        chat model's header."""
        return self.arch_integer("pooling_type")

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
_cache: dict[Path, tuple[tuple[int, int, int, int], GGUFHeader, bool]] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every header read so far (the next read parses the file again)."""
    with _cache_lock:
        _cache.clear()


def read_header(path: str | os.PathLike[str], exact: bool = True) -> GGUFHeader:
    """Read the metadata and tensor list of a GGUF v2/v3 file; GGUFError if unusable.

    With ``exact=False`` large string arrays (vocabulary, merges) are skipped by finding
    the key that follows them instead of walking every string; the result is accepted
    only if the rest of the header and the tensor table then fit the file exactly, and
    is otherwise read again the exact way. For an intact file the result is the same
    header; damage inside a skipped array is found only by the exact way.
    """
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
        if cached is not None and cached[0] == signature and (cached[2] or not exact):
            return cached[1]
        with path.open("rb") as file:
            header, was_exact = _parse(file, os.fstat(file.fileno()).st_size, path, exact)
        with _cache_lock:
            if len(_cache) >= _CACHE_SIZE:
                _cache.pop(next(iter(_cache)))
            _cache[path] = (signature, header, was_exact)
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


def joined(headers: Sequence[GGUFHeader]) -> GGUFHeader:
    """A split model's header: its first shard holds the metadata, every shard holds
    tensors."""
    return replace(headers[0], tensors=[t for h in headers for t in h.tensors])


def read_header_from(file: BinaryIO, size: int, name: str, exact: bool = False) -> GGUFHeader:
    """The header of a GGUF file of ``size`` bytes read through ``file``, which only needs
    seek and read: a file on a server read by ranges, where a byte not read is a byte not
    fetched. ``name`` stands for the file in messages and as the header's path."""
    path = Path(name)
    try:
        return _parse(file, size, path, exact)[0]
    except GGUFError as error:
        error.path = path
        raise


def _parse(file: BinaryIO, size: int, path: Path, exact: bool) -> tuple[GGUFHeader, bool]:
    """The header, and whether it was read the exact way."""
    if not exact:
        parser = _Parser(file, size, exact=False)
        try:
            header = parser.parse(path)
        except GGUFError:
            if not parser.guessed:
                raise  # the exact reader fails at the same place
        else:
            if not parser.guessed or _fits_exactly(file, header):
                return header, not parser.guessed
    return _Parser(file, size).parse(path), True


def _fits_exactly(file: BinaryIO, header: GGUFHeader) -> bool:
    """Whether a header read with skipped arrays describes the file byte for byte.

    A wrong guess of where an array ends leaves the rest of the header parsed from the
    wrong bytes; that the tensors then tile the data section, aligned, without overlap,
    ending where the file ends (give or take the final padding), and that the padding
    before the data is zeros, does not happen by accident.
    """
    alignment, end = header.alignment, 0
    for tensor in sorted(header.tensors, key=lambda t: t.offset):
        nbytes = tensor.nbytes
        if nbytes is None or tensor.offset % alignment or tensor.offset < end:
            return False
        end = tensor.offset + nbytes
    tensors_end = header.tensor_info_span[1]
    if header.tensors:
        data_end = header.data_offset + end
        if not data_end <= header.file_size < data_end + alignment:
            return False
    elif not tensors_end <= header.file_size <= header.data_offset:
        return False
    file.seek(tensors_end)
    padding = file.read(header.data_offset - tensors_end)
    return padding == bytes(len(padding))


def _truncated(what: str) -> GGUFError:
    return GGUFError(f"file is truncated or damaged: {what} runs past the end of the file")


class _Parser:
    """A cursor over the file that loads a window of bytes at a time."""

    def __init__(self, file: BinaryIO, size: int, exact: bool = True) -> None:
        self._file = file
        self._size = size
        self._buf = b""
        self._base = 0  # file offset of _buf[0]
        self.pos = 0
        self._exact = exact
        self.guessed = False  # an array's end was found by search, not by walking it
        self._keys: dict[str, MetaValue] = {}  # metadata read so far
        self._kv_left = 0  # entries after the one being read

    def _window(self, n: int, what: str) -> int:
        """Make bytes [pos, pos + n) readable; return their index in the buffer."""
        start = self.pos - self._base
        if start >= 0 and start + n <= len(self._buf):
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

    def _find_end(self, count: int) -> int | None:
        """Where a string array starting at pos probably ends: the first place after it
        that reads as the next key (or the first tensor), or None.

        Searches for likely key prefixes, the likeliest first, preceded by the seven
        zero bytes of a short key's length: bytes.find runs at memory speed, walking
        a 262k-token vocabulary in Python does not.
        """
        lower = self.pos + 8 * count  # each string has at least its 8-byte length
        limit = min(self._size, lower + count * 256 + _SEARCH_CHUNK)
        arch = self._keys.get("general.architecture")
        prefixes = _NEXT_PREFIXES + ((arch.encode() + b".",) if isinstance(arch, str) else ())
        zeros = bytes(7)
        for prefix in prefixes:
            tries = 0
            start = lower - 8
            while start < limit and tries < _MAX_TRIES:
                self._file.seek(start)
                chunk = self._file.read(min(_SEARCH_CHUNK, limit - start) + len(prefix) + 8)
                at = chunk.find(prefix, 8)
                while at >= 0 and tries < _MAX_TRIES:
                    if chunk[at - 7 : at] == zeros and self._follows(start + at - 8):
                        return start + at - 8
                    tries += 1
                    at = chunk.find(prefix, at + 1)
                start += _SEARCH_CHUNK
        return None

    def _follows(self, at: int, kv_left: int | None = None, depth: int = 2) -> bool:
        """Whether a metadata entry (or, after the last, a tensor) plausibly starts at
        `at`, and so does the item after it (`depth` items are looked at)."""
        kv_left = self._kv_left if kv_left is None else kv_left
        saved = self.pos
        self.pos = at
        try:
            name = self._string("name")
            if "." not in name or not name.isascii() or not name.isprintable():
                return False
            if kv_left == 0:  # the tensor table
                n_dims = self._u32("dims")
                if not 1 <= n_dims <= MAX_DIMS:
                    return False
                self.pos += 8 * n_dims
                return self._u32("type") in GGML_TYPES
            if name in self._keys:
                return False
            vtype = self._u32("type")
            if vtype == ValueType.ARRAY:
                etype, length = self._u32("type"), self._u64("length")
                if etype == ValueType.STRING:  # cannot be stepped over cheaply
                    return length <= MAX_ARRAY and 8 * length <= self._size - self.pos
                self.pos += _STRUCTS[etype].size * length
            elif vtype == ValueType.STRING:
                self.pos += self._u64("length")
            else:
                self.pos += _STRUCTS[vtype].size
            if self.pos > self._size:
                return False
            return depth <= 1 or self._follows(self.pos, kv_left - 1, depth - 1)
        except (GGUFError, KeyError):
            return False
        finally:
            self.pos = saved

    def _array(self, key: str) -> ArrayInfo:
        what = f"array {key!r}"
        etype = self._u32(what)
        length = self._u64(what)
        if length > MAX_ARRAY:
            raise GGUFError(f"damaged header: array {key!r} claims {length:,} elements")
        if etype == ValueType.STRING:
            self._need(length * 8, what)  # each element has at least its 8-byte length
            if length <= SMALL_ARRAY:
                return ArrayInfo(
                    ValueType.STRING, length, [self._string(what) for _ in range(length)]
                )
            end = None if self._exact or length <= _GUESS_MIN else self._find_end(length)
            if end is None:
                self._skip_strings(length, what)
            else:
                self.pos, self.guessed = end, True
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
        if n_kv > MAX_KV or n_tensors > MAX_TENSORS:
            raise GGUFError(
                f"damaged header: it claims {n_kv:,} metadata entries and {n_tensors:,} tensors"
            )
        # Smallest possible entries: key length + type + 1-byte value; name length +
        # n_dims + type + offset. Refuse counts the file cannot hold before looping.
        self._need(
            n_kv * 13 + n_tensors * 24,
            f"a header of {n_kv:,} metadata entries and {n_tensors:,} tensors",
        )
        return version, n_tensors, n_kv

    def parse(self, path: Path) -> GGUFHeader:
        version, n_tensors, n_kv = self._preamble()

        metadata: dict[str, MetaValue] = self._keys
        spans: dict[str, tuple[int, int]] = {}
        for index in range(n_kv):
            self._kv_left = n_kv - index - 1
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
            if math.prod(shape) > MAX_ELEMENTS:
                raise GGUFError(f"damaged header: tensor {name!r} has too many elements")
            names.add(name)
            tensors.append(TensorInfo(name, tuple(shape), ggml_type, offset))
        tensors_end = self.pos
        _check_hyperparameters(metadata)

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


def _check_hyperparameters(metadata: dict[str, MetaValue]) -> None:
    """Refuse sizes that would make llama.cpp allocate absurdly (or abort) on load."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        return
    limits = [
        ("context_length", MAX_CONTEXT, "a context of {:,} tokens"),
        ("block_count", MAX_LAYERS, "{:,} layers"),
        ("expert_count", MAX_EXPERTS, "{:,} experts"),
        ("embedding_length", MAX_WIDTH, "an embedding of {:,} values"),
        ("feed_forward_length", MAX_WIDTH, "a feed-forward width of {:,}"),
        ("attention.key_length", MAX_WIDTH, "attention keys of {:,} values"),
        ("attention.value_length", MAX_WIDTH, "attention values of {:,} values"),
        ("attention.head_count", MAX_HEADS, "{:,} attention heads"),
        ("attention.head_count_kv", MAX_HEADS, "{:,} key-value heads"),
        ("attention.sliding_window", MAX_CONTEXT, "a sliding window of {:,} tokens"),
    ]
    for suffix, limit, claim in limits:
        value = metadata.get(f"{arch}.{suffix}")
        values = (value.values or []) if isinstance(value, ArrayInfo) else [value]
        for number in values:
            if isinstance(number, (int, float)) and not isinstance(number, bool) and (
                number > limit or number < 0
            ):
                raise GGUFError(f"damaged header: it claims {claim.format(number)}")
