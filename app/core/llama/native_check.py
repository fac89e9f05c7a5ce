"""Does llama.cpp's compiled code run on this CPU? Asked of a child process.

A fault in llama.cpp's kernels (an illegal instruction, or the segmentation fault of
its AMX kernels on Sapphire Rapids, llama.cpp #20824) kills the process that runs
them: there is no Python exception to catch. So a child process loads a model and
decodes a batch of several tokens (the case that crashed; a single token did not),
and the parent reads how it ended. ``make setup`` and the test suite ask first, so a
crash reads "llama.cpp crashed on this CPU" instead of a suite dying halfway; the
bundle asks once per llama.cpp version and CPU (:mod:`app.core.llama.cpu_backends`).

``python -m app.core.llama.native_check [MODEL ...]`` checks the given models (default: the
bundled ones) and exits 1 if any crashed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHILD_FLAG = "--native-check"  # how the bundle's executable is told to be the child
VARIANT_ENV = "FIRESIDE_CPU_VARIANT"  # a portable build's CPU backend the child loads alone
TIMEOUT_S = 120.0
PROMPT = b"Hello there! How are you today? Tell me about the sea, the sky and the hills."

# The CPU features llama.cpp's x86 kernels are built for; the rest of /proc/cpuinfo's
# flags say nothing about a crash in them.
_SIMD = re.compile(r"^(sse4_2|avx|avx2|fma|f16c|bmi2|avx_vnni|avx512\w*|amx\w*)$")


@dataclass(frozen=True)
class NativeCheck:
    """How the child that decoded a batch of ``model`` ended."""

    model: Path
    returncode: int | None  # None: it did not finish in time
    output: str  # the end of what it printed

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def ending(self) -> str:
        """How the child ended, in words: "SIGSEGV", "exit status 1", "no answer in 120 s"."""
        code = self.returncode
        if code is None:
            return f"no answer in {TIMEOUT_S:.0f} s"
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        if sys.platform == "win32" and code >= 0xC0000000:
            return f"exception 0x{code:08X}"
        return f"exit status {code}"

    def message(self) -> str:
        if self.ok:
            return f"llama.cpp decoded a batch of {self.model.name} on this CPU."
        crashed = self.returncode is None or self.returncode < 0 or self.returncode >= 0xC0000000
        what = "crashed" if crashed else "failed"
        tail = self.output.strip().splitlines()[-3:]
        return (f"llama.cpp {what} on this CPU ({self.ending}) while loading "
                f"{self.model.name} and decoding a batch. CPU: {cpu_summary()}."
                + (f" Last output: {' | '.join(tail)}" if tail else ""))


def cpu_identity() -> tuple[str, list[str]]:
    """The CPU's name and all its feature flags, as the operating system reports them."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        import platform  # noqa: PLC0415 - only where /proc is missing

        return platform.processor() or platform.machine(), []
    name = re.search(r"^(?:model name|Hardware|cpu model)\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.M)
    return (name.group(1).strip() if name else "unknown",
            flags.group(1).split() if flags else [])


def cpu_summary() -> str:
    """The CPU's name and the instruction sets llama.cpp's kernels use."""
    name, flags = cpu_identity()
    simd = [f for f in flags if _SIMD.match(f)]
    return f"{name}, flags: {' '.join(simd) or 'none'}"


def child_command(model: Path) -> list[str]:
    """The command that runs the check's child for ``model``, in a bundle or not."""
    if getattr(sys, "frozen", False):
        return [sys.executable, CHILD_FLAG, str(model)]
    return [sys.executable, "-m", "app.core.llama.native_check", CHILD_FLAG, str(model)]


def check(model: Path, *, command: Sequence[str] | None = None,
          env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S) -> NativeCheck:
    """Decode a batch of ``model`` in a child process; report how it ended."""
    try:
        done = subprocess.run(list(command or child_command(model)), capture_output=True,
                              text=True, errors="replace", timeout=timeout, check=False,
                              env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        output = expired.stderr or ""
        return NativeCheck(model, None, output if isinstance(output, str) else "")
    return NativeCheck(model, done.returncode, (done.stdout + done.stderr)[-2000:])


def child(model: Path) -> int:
    """The child's side: load ``model``, decode a batch of several tokens, then one."""
    import llama_cpp  # noqa: PLC0415 - the parent never loads llama.cpp for this

    from app.core.llama import llama_runtime  # noqa: PLC0415 - routes llama.cpp's log

    with llama_runtime.load_progress(lambda _fraction: True):  # the app's load parameters
        llm = llama_cpp.Llama(model_path=str(model), n_ctx=256, n_batch=64, use_mmap=False,
                              verbose=False)
    try:
        tokens = llm.tokenize(PROMPT)
        llm.eval(tokens)  # one batch of many tokens
        llm.eval([llm.sample(temp=0.0)])  # and one of a single token
    finally:
        llm.close()
    print(llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip())
    return 0


def main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == CHILD_FLAG:
        return child(Path(argv[1]))
    from app.core.models import bundled  # noqa: PLC0415

    models = [Path(a) for a in argv] or bundled.bundled_model_paths()
    failed = False
    for model in models:
        result = check(model)
        print(result.message(), file=sys.stdout if result.ok else sys.stderr)
        failed = failed or not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
