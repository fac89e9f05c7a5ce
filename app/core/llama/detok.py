"""Incremental, UTF-8-safe detokenization of a token stream.

A character may be split across tokens (emoji, CJK, byte-fallback tokens): bytes are
held back until the character is complete, so no piece ever carries U+FFFD for a
split character and nothing is dropped at the end.
"""

from __future__ import annotations

import codecs
import ctypes

import llama_cpp


class PieceDecoder:
    def __init__(self, vocab: llama_cpp.llama_vocab_p, shown: frozenset[int] = frozenset()) -> None:
        self._vocab = vocab
        self._shown = shown  # control tokens rendered after all: a thought's markers
        self._buffer = ctypes.create_string_buffer(256)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def token_bytes(self, token: int) -> bytes:
        # Control tokens render as nothing (special=False): they are never shown.
        special = token in self._shown
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buffer,
                                           len(self._buffer), 0, special)
        if n < 0:  # the piece is longer than the buffer: -n is the size needed
            self._buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buffer,
                                               len(self._buffer), 0, special)
        return self._buffer.raw[:n]

    def decode(self, token: int) -> str:
        """The text this token completes; may be empty while a character is pending."""
        return self._utf8.decode(self.token_bytes(token))

    def flush(self) -> str:
        """Whatever is still pending (an unfinished character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)
