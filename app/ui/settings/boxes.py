"""The number boxes and lists of the settings that the defaults (Models, Replies) and
"This model" share, and what a box's value means for its setting."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

from app.core.options import DEFAULT_BATCH

MIN_CONTEXT = 256
MIN_BATCH = 32
CLAMPED = object()  # a value put right in its box, which reports the new one itself
W = TypeVar("W", QSpinBox, QDoubleSpinBox)
BoxMaker = Callable[[QWidget, str, str], QWidget]
"""Makes a box from its parent, its object name and the name screen readers say."""

# Settings where 0 in the box means "automatic" or "no limit", kept as None.
_ZERO_IS_NONE = ("context_size", "threads", "prompt_threads", "batch_size", "thinking_budget")


def named(widget: QWidget, name: str, label: str) -> None:
    widget.setObjectName(name)
    widget.setAccessibleName(label)


def spin(box: W, name: str, label: str) -> W:
    named(box, name, label)
    box.setKeyboardTracking(False)  # one save per finished edit, not per keystroke
    return box


def real_box(low: float, high: float, step: float) -> Callable[[QWidget, str, str],
                                                               QDoubleSpinBox]:
    def make(parent: QWidget, name: str, label: str) -> QDoubleSpinBox:
        box = spin(QDoubleSpinBox(parent), name, label)
        box.setRange(low, high)
        box.setSingleStep(step)
        box.setDecimals(2)
        return box

    return make


def whole_box(low: int, high: int, special: str = "") -> Callable[[QWidget, str, str],
                                                                   QSpinBox]:
    def make(parent: QWidget, name: str, label: str) -> QSpinBox:
        box = spin(QSpinBox(parent), name, label)
        box.setRange(low, high)
        box.setSpecialValueText(special)
        return box

    return make


def context_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = whole_box(0, 1 << 20, "Model default (at most 8,192)")(parent, name, label)
    box.setSingleStep(1024)
    box.setSuffix(" tokens")
    return box


def threads_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    return whole_box(0, max(4, (os.cpu_count() or 1) * 2),
                     "Automatic (one per core)")(parent, name, label)


def _batch_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = whole_box(0, 8192, f"Automatic ({DEFAULT_BATCH})")(parent, name, label)
    box.setSingleStep(128)
    box.setSuffix(" tokens")
    return box


def choice_box(parent: QWidget, name: str, label: str,
               choices: Sequence[tuple[str, str]]) -> QComboBox:
    box = QComboBox(parent)
    named(box, name, label)
    for value, text in choices:
        box.addItem(text, value)
    return box


def _choices(choices: Sequence[tuple[str, str]]) -> BoxMaker:
    return lambda parent, name, label: choice_box(parent, name, label, choices)


# llama.cpp's switches, in the defaults and in "This model": field, label, box.
_FLASH_CHOICES = (("auto", "Automatic (on where llama.cpp runs it)"), ("on", "On"),
                  ("off", "Off"))
_KV_CHOICES = (("f16", "f16 (exact)"), ("q8_0", "q8_0 (about half the memory)"),
               ("q4_0", "q4_0 (about a quarter; may change answers)"))
TUNING_BOXES: tuple[tuple[str, str, BoxMaker], ...] = (
    ("prompt_threads", "Prompt threads", threads_box),
    ("batch_size", "Batch size", _batch_box),
    ("flash_attention", "Flash attention", _choices(_FLASH_CHOICES)),
    ("kv_cache", "KV cache", _choices(_KV_CHOICES)),
)

# A thinking model's thinking (thinking.THINKING_CHOICES): low/medium/high is gpt-oss's
# reasoning effort; elsewhere each means "on".
_THINKING_CHOICES = (("on", "On"), ("off", "Off (answer at once)"),
                     ("low", "Low effort (gpt-oss)"), ("medium", "Medium effort (gpt-oss)"),
                     ("high", "High effort (gpt-oss)"))


def _budget_box(parent: QWidget, name: str, label: str) -> QSpinBox:
    box = whole_box(0, 1 << 20, "No limit")(parent, name, label)
    box.setSingleStep(100)
    box.setSuffix(" tokens")
    box.setToolTip("After this many thinking tokens Fireside ends the thought and the "
                   "model answers")
    return box


def _speculation_box(parent: QWidget, name: str, label: str) -> QCheckBox:
    box = QCheckBox("On", parent)
    named(box, name, label)
    box.setToolTip("Drafts tokens from the conversation (and the draft model) for the model "
                   "to check in one pass: faster where the reply repeats its input. The "
                   "model keeps only the tokens it would have written itself")
    return box


# The sampling settings, in the defaults (Replies) and in "This model": field, label, box.
SAMPLING_BOXES: tuple[tuple[str, str, BoxMaker], ...] = (
    ("temperature", "Temperature", real_box(0.0, 2.0, 0.05)),
    ("top_p", "Top-p", real_box(0.01, 1.0, 0.01)),
    ("top_k", "Top-k", whole_box(0, 1000, "Off")),
    ("min_p", "Min-p", real_box(0.0, 1.0, 0.01)),
    ("repeat_penalty", "Repeat penalty", real_box(0.5, 2.0, 0.05)),
    ("max_tokens", "Max reply tokens", whole_box(1, 1 << 20)),
    ("thinking", "Thinking", _choices(_THINKING_CHOICES)),
    ("thinking_budget", "Thinking budget", _budget_box),
    ("speculation", "Speculative decoding", _speculation_box),
)


def spin_value(field: str, box: QSpinBox | QDoubleSpinBox) -> object:
    """What a box's value means for ``field``: 0 is "automatic" for the context size and
    threads; a context below MIN_CONTEXT (a batch below MIN_BATCH) is raised to it in the
    box, which then reports the new value, and CLAMPED says so."""
    if isinstance(box, QDoubleSpinBox):
        return round(box.value(), 2)
    value = box.value()
    floor = {"context_size": MIN_CONTEXT, "batch_size": MIN_BATCH}.get(field, 0)
    if 0 < value < floor:
        box.setValue(floor)  # comes back here with a usable size
        return CLAMPED
    if field in _ZERO_IS_NONE:
        return value or None
    return value
