# zerokit: see README.md. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

STACK ?= cpu
PYTHON ?= python3
# The cpu stack's environment is the dev one; another stack's gets its own, so building it does
# not replace the dev environment.
VENV ?= $(if $(filter cpu,$(STACK)),.venv,build/venv-$(STACK))
VPY := $(VENV)/bin/python
# A folder of wheels that are not on PyPI or of every wheel (air-gapped sites). By default the
# CPU torch wheel folder of this kind of machine, for the cpu stack only: in a CUDA stack's lock
# torch is PyPI's CUDA build, and the folder's +cpu wheel would not match its hash.
WHEELHOUSE ?= $(if $(filter cpu,$(STACK)),$(wildcard /opt/wheels))
DS_WHEEL_DIR := build/wheels/$(STACK)
DS_WHEEL_STAMP := $(DS_WHEEL_DIR)/.built
DS_WHEEL_INPUTS := $(DS_WHEEL_DIR).inputs
LOCK := containers/lock/$(STACK).txt
STACK_FILE := containers/stacks/$(STACK).toml
STACK_CMD := PYTHONPATH=src $(PYTHON) -m zerokit.image.stack $(STACK)
# Project-local JIT cache: never ~/.cache/torch_extensions, which other environments clobber.
export TORCH_EXTENSIONS_DIR := $(CURDIR)/build/torch_extensions
PYTEST_ARGS ?=

EXTRA_INDEX = $(shell $(STACK_CMD) get extra_index_url)
PIP_SOURCES = $(if $(WHEELHOUSE),--find-links $(WHEELHOUSE),$(if $(EXTRA_INDEX),--extra-index-url $(EXTRA_INDEX)))
export PIP_FIND_LINKS := $(WHEELHOUSE)
# The dev environment's uv, for every stack.
UV ?= .venv/bin/uv
UV_COMPILE = $(UV) pip compile --generate-hashes --no-header $(PIP_SOURCES) $(LOCK_TARGET)
# The site stack's lock serves every Python from 3.11 and leaves torch, and what only torch needs, to the
# site (the override gives them a marker that never holds, so pip skips them); the versions it shares with
# the cpu lock are the cpu lock's, so the test tools' lock (dev.txt) fits both.
LOCK_TARGET = $(if $(filter site,$(STACK)),--universal --python-version 3.11 \
  --override containers/lock/site.overrides.txt -c build/lock/cpu-without-torch.txt,\
  --python-version $(shell $(STACK_CMD) get python) --python-platform x86_64-manylinux_2_28)

# Images (see Dockerfile): make image STACK=cpu BASE_IMAGE=... TAG=... CA_FILE=... WHEELHOUSE=...
DOCKER ?= docker
BASE_IMAGE ?= $(shell $(STACK_CMD) get base_image)
TAG ?= zerokit:$(STACK)
CA_FILE ?=
LOCAL_BASE_IMAGE ?= zerokit/debian:bookworm

SIF ?= train.sif
APPTAINER ?= $(firstword $(shell command -v apptainer singularity 2>/dev/null))

# Smoke test of an image (see docs/gpu.md): `zerokit smoke` inside it, the GPU passed in; SMOKE_DEVICE=cpu
# runs the same steps on CPU ranks. RUNTIME: one of src/zerokit/image/runtimes.py's table, which gives the words
# (IMAGE: a Docker tag for docker/podman, a .sif for apptainer/singularity, a directory for charliecloud).
IMAGE ?= $(TAG)
RUNTIME ?= docker
SMOKE_DEVICE ?= gpu
SMOKE_OUT ?= runs/smoke
SMOKE_WORDS = DOCKER=$(DOCKER) APPTAINER=$(APPTAINER) $(PYTHON) src/zerokit/image/runtimes.py argv $(RUNTIME) $(IMAGE) \
  $(if $(filter gpu,$(SMOKE_DEVICE)),--gpu) --bind $(abspath $(SMOKE_OUT)) --as-caller

.PHONY: FORCE help sysdeps venv demo test test-gpu gpu-proof gpu-bundle soak lint lock clean image base-image sif sif-extra smoke bench

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

sysdeps:  ## install the system packages the environment needs (as root on Debian/Ubuntu)
	@containers/install-sysdeps

# A site stack's venv sees the torch of PYTHON (its facts recorded first, checked unchanged after the install).
# SITE_PROVIDES=pyarrow,numpy: lock packages taken from the site at its versions too (recorded and checked alike).
SITE_PROVIDES ?=
# DEV_LOCK: the test tools (tests/gpu/proof takes only the test runner, from make gpu-bundle's folder).
DEV_LOCK ?= containers/lock/dev.txt
# A site's torch swapped since: its digest is in the wheel's inputs, so the venv is made (facts recorded) anew.
$(VENV)/.lock-$(STACK): $(LOCK) $(DEV_LOCK) $(if $(filter site,$(STACK)),$(DS_WHEEL_INPUTS)) | sysdeps
	$(if $(filter site,$(STACK)),PYTHONPATH=src $(PYTHON) -m zerokit.image.site_torch make-venv $(VENV) --lock $(LOCK) \
  --site-provides '$(SITE_PROVIDES)',$(PYTHON) -m venv $(VENV))
	containers/install-lock $(VPY) $(STACK)
	$(VPY) -m pip install --quiet --no-deps --require-hashes --no-compile -r $(DEV_LOCK)
	$(if $(filter site,$(STACK)),PYTHONPATH=src $(VPY) -m zerokit.image.site_torch check)
	touch $@

# Rewritten only when what the wheel is built from changes (Python, torch, DeepSpeed, the ops and
# their flags), so a package added to the lock does not recompile the ops.
$(DS_WHEEL_INPUTS): FORCE
	@mkdir -p $(@D) && $(STACK_CMD) ds-wheel-inputs > $@.new && { cmp -s $@.new $@ && rm $@.new || mv $@.new $@; }

# The CUDA_HOME scripts only for cuda stacks: an edit to them does not recompile the cpu stack's ops.
DS_WHEEL_SCRIPTS := containers/cached-ds-wheel containers/build-ds-wheel containers/portable-cc \
  $(if $(filter site,$(STACK)),containers/system-cuda-home,\
  $(if $(filter cuda,$(shell $(STACK_CMD) get accelerator)),containers/cuda-home containers/system-cuda-home))

$(DS_WHEEL_STAMP): $(DS_WHEEL_INPUTS) $(DS_WHEEL_SCRIPTS) | $(VENV)/.lock-$(STACK)
	rm -rf $(DS_WHEEL_DIR) && mkdir -p $(DS_WHEEL_DIR)
	@# Each op's compile timed (pip's -v, from PIP_VERBOSE: the scripts, and so the wheel cache's key, stay as they are).
	PIP_VERBOSE=1 $(VPY) containers/op-build-times $(DS_WHEEL_DIR)/build-ds-wheel.log -- \
	  containers/cached-ds-wheel $(VPY) $(STACK) $(DS_WHEEL_DIR)
	touch $@

$(VENV)/.ready-$(STACK): $(DS_WHEEL_STAMP) pyproject.toml
	$(VPY) -m pip install --quiet --no-deps --force-reinstall --no-compile $(DS_WHEEL_DIR)/deepspeed-*.whl
	@# Hash-based .pyc, as containers/install-lock writes them: no install-time stamps (docs/reproducible.md).
	PYTHONHASHSEED=0 $(VPY) -m compileall -q -j 0 --invalidation-mode unchecked-hash \
	  "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
	$(VPY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(VPY) -m zerokit ops-gate $(STACK)
	touch $@

venv: $(VENV)/.ready-$(STACK)  ## create .venv from the lock, with DeepSpeed's ops prebuilt

demo: venv  ## the main job: 2 CPU ranks, ZeRO-3, embedded default, into runs/demo/
	$(VENV)/bin/zerokit demo --output runs/demo --overwrite

# bench's start-up comparison: the same DeepSpeed with no prebuilt ops, beside the venv.
JIT_ENV := build/bench/jit-env-$(STACK)
BENCH_ARGS ?=

$(JIT_ENV)/.ready: $(VENV)/.ready-$(STACK) tests/bench/make-jit-env
	rm -rf $(JIT_ENV) && tests/bench/make-jit-env $(VPY) $(STACK) $(JIT_ENV) && touch $@

bench: venv $(JIT_ENV)/.ready  ## CPU-sized report in runs/bench/ (ranks, configs, JIT and data start-up, plain HF, preemption cost); BENCH_ARGS=...
	$(VENV)/bin/zerokit bench --output runs/bench --overwrite --jit-python $(JIT_ENV)/bin/python $(BENCH_ARGS)

test: venv  ## run the test suite
	$(VPY) -m pytest $(PYTEST_ARGS)

test-gpu: venv  ## the gpu-marked tests, in STACK's environment on a GPU node (make test-gpu STACK=cuda13)
	ZEROKIT_STACK=$(STACK) $(VPY) -m pytest -m gpu tests/gpu $(PYTEST_ARGS)

# The GPU proof (docs/gpu.md): on a GPU machine with its own CUDA torch, zerokit's ops built for its GPU and
# proven there, report in build/gpu-proof/. For a machine without a package index, make gpu-bundle here first
# (GPU_PIP_LIST: the machine's `python3 -m pip list --format json`, so what it has stays out).
GPU_PYTHON ?= python3
GPU_PYTHON_VERSION ?= 3.12
GPU_PIP_LIST ?=
# What the machine has at other versions and the bundle leaves to it (SITE_PROVIDES), when the lock's wheels
# would not fit in 64 MiB: e.g. pyarrow,numpy,pandas,matplotlib,grpcio,pillow,tensorboard,fonttools.
GPU_SITE_PROVIDES ?=
GPU_BUNDLE ?= build/gpu-bundle
gpu-proof:  ## on a GPU machine: site venv over its torch, ops for its GPU, doctor, smoke, gpu tests, bench; a report
	tests/gpu/proof --python $(GPU_PYTHON) $(if $(wildcard $(GPU_BUNDLE)),--wheelhouse $(GPU_BUNDLE))

gpu-bundle: venv  ## here: the wheels the GPU machine lacks (Python GPU_PYTHON_VERSION), at most 64 MiB, in GPU_BUNDLE
	$(VPY) containers/gpu-bundle $(GPU_BUNDLE) --python $(GPU_PYTHON_VERSION) $(if $(GPU_PIP_LIST),--installed $(GPU_PIP_LIST)) \
	  $(if $(GPU_SITE_PROVIDES),--site-provides $(GPU_SITE_PROVIDES))

# Each multi-node launcher's short job SOAK_RUNS times on the namespace cluster, in $(SIF) (tests/cluster/soak).
SOAK_RUNS ?= 20
soak: venv  ## as root: every multi-node launcher's job SOAK_RUNS times in $(SIF); runs and failures each
	PATH="$$(tests/apptainer/provision):$$PATH" $(VPY) tests/cluster/soak --sif $(SIF) --runs $(SOAK_RUNS)

lint: venv  ## ruff
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

lock:  ## re-resolve containers/lock/$(STACK).txt from the stack's pins (needs uv)
	{ echo "# Top-level pins of $(STACK_FILE); regenerate with: make lock STACK=$(STACK)"; $(STACK_CMD) requirements; } > containers/lock/$(STACK).in
	$(if $(filter site,$(STACK)),mkdir -p build/lock && awk '/^torch==/ {s=1; next} s && /^ / {next} {s=0; print}' \
	  containers/lock/cpu.txt > build/lock/cpu-without-torch.txt)
	$(UV_COMPILE) containers/lock/$(STACK).in -o $(LOCK)
	$(if $(filter cpu,$(STACK)),$(UV_COMPILE) containers/lock/dev.in -c containers/lock/cpu.txt -o containers/lock/dev.txt)

base-image:  ## make $(LOCAL_BASE_IMAGE) with debootstrap, for machines that reach no registry
	DOCKER=$(DOCKER) containers/make-base-image $(LOCAL_BASE_IMAGE)

# Extra packages (docs/extra-packages.md): EXTRA=requirements.txt also builds EXTRA_TAG, the image plus
# those packages, locked against the stack's pins beside the file (requirements.STACK.lock.txt).
EXTRA ?=
EXTRA_TAG ?= $(TAG)-extra

image:  ## build the Docker image of STACK (reuses build/wheels/STACK from make venv); EXTRA=reqs.txt: + a derived image
	rm -rf build/wheelhouse && mkdir -p build/wheelhouse
	$(if $(WHEELHOUSE),cp -l $(WHEELHOUSE)/*.whl build/wheelhouse/ 2>/dev/null || cp $(WHEELHOUSE)/*.whl build/wheelhouse/)
	DOCKER=$(DOCKER) containers/build-image $(STACK) $(TAG) $(BASE_IMAGE) $(CA_FILE)
	$(if $(EXTRA),DOCKER=$(DOCKER) UV=$(UV) containers/build-extra-image $(STACK) $(TAG) $(EXTRA) $(EXTRA_TAG) $(CA_FILE))

# Provenance (docs/provenance.md): the SBOM that image TAG carries, copied out; and two builds from
# scratch compared (docs/reproducible.md; it compiles DeepSpeed's ops twice).
SBOM_OUT ?= build/sbom/$(STACK).cdx.json
.PHONY: sbom verify-reproducible

sbom:  ## copy image TAG's SBOM (CycloneDX JSON of its venv and Debian packages) to $(SBOM_OUT)
	DOCKER=$(DOCKER) containers/sbom $(TAG) $(SBOM_OUT)

verify-reproducible:  ## build STACK twice from scratch (venv, image, DeepSpeed wheel), compare; build/repro/
	DOCKER=$(DOCKER) containers/verify-reproducible $(STACK) $(BASE_IMAGE) $(CA_FILE)

# Where `make sif` takes the image (docs/registry.md): docker-daemon:TAG (the default), docker://host:port/zerokit:cpu
# or @sha256:... (a registry: no Docker needed), docker-archive:FILE, oci-archive:FILE. NO_HTTPS=1: a plain-HTTP registry.
FROM ?= docker-daemon:$(TAG)
NO_HTTPS ?=
sif:  ## turn image FROM (default: Docker's TAG; or docker://REGISTRY:TAG, an archive) into $(SIF) with Apptainer
	@test -n "$(APPTAINER)" || { echo "error: apptainer (or singularity) is not installed: install it \
	(https://apptainer.org/docs/admin/main/installation.html), or push the image to a registry the cluster reaches \
	(make push REGISTRY=...) and run make sif FROM=docker://... there" >&2; exit 2; }
	from='$(FROM)' && bootstrap=$${from%%:*} && ref=$${from#*:} && \
	  $(APPTAINER) build --force $(if $(NO_HTTPS),--no-https) --build-arg BOOTSTRAP=$$bootstrap \
	  --build-arg FROM=$${ref#//} --build-arg STACK=$(STACK) $(SIF) apptainer.def
	@echo "make sif: $(SIF), $$(du -m $(SIF) | cut -f1) MiB"

# Registries and signatures (docs/registry.md): image TAG pushed as REGISTRY:STACK, :STACK-VERSION and
# :STACK-COMMIT; a SIF pushed and pulled as an OCI artifact (oras://); a PGP key in Apptainer's keyring
# (APPTAINER_KEYSDIR chooses it) to sign a SIF with, and the check of a signed SIF.
REGISTRY ?=
SIF_REF ?= $(REGISTRY)-sif:$(STACK)
.PHONY: push push-sif pull-sif signing-key sign-sif verify-sif
push:  ## push image TAG to REGISTRY=host:port/zerokit as :STACK, :STACK-VERSION, :STACK-COMMIT; prints the digest
	DOCKER=$(DOCKER) containers/push-image $(TAG) '$(REGISTRY)' $(STACK)

push-sif:  ## push $(SIF) to oras://$(SIF_REF) (an OCI artifact: the SIF file as it is)
	@test -n "$(REGISTRY)" || { echo "error: give the registry: make push-sif REGISTRY=host:port/zerokit" >&2; exit 2; }
	$(APPTAINER) push $(if $(NO_HTTPS),--no-https) $(SIF) oras://$(SIF_REF)

pull-sif:  ## pull oras://$(SIF_REF) into $(SIF)
	@test -n "$(REGISTRY)" || { echo "error: give the registry: make pull-sif REGISTRY=host:port/zerokit" >&2; exit 2; }
	$(APPTAINER) pull --force $(if $(NO_HTTPS),--no-https) $(SIF) oras://$(SIF_REF)

NAME ?=
EMAIL ?=
signing-key:  ## a PGP key pair for NAME= EMAIL= in Apptainer's keyring (APPTAINER_KEYSDIR), no passphrase, no prompt
	@test -n "$(NAME)" -a -n "$(EMAIL)" || { echo "error: name the key: make signing-key NAME='Site CI' EMAIL=ci@example.org" >&2; exit 2; }
	$(APPTAINER) key newpair --name '$(NAME)' --email '$(EMAIL)' --comment 'zerokit SIF signing' --password '' --push=false

sign-sif:  ## sign $(SIF) with the keyring's key
	$(APPTAINER) sign $(SIF)

verify-sif:  ## $(SIF)'s signature checked against the keyring, and its labels against what it holds
	APPTAINER=$(APPTAINER) containers/verify-sif $(SIF)

SIF_BASE ?= $(SIF)
SIF_EXTRA ?= $(basename $(SIF_BASE))-extra.sif
# The CA bundle pip trusts in the build (a site's CA_FILE, else the host's): copied in, removed before the SIF is made.
SIF_CA = $(or $(CA_FILE),$(firstword $(wildcard /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt)))
sif-extra:  ## without Docker: SIF_BASE plus EXTRA=requirements.txt (locked against the stack) into SIF_EXTRA
	@test -n "$(EXTRA)" || { echo "error: give the packages: make sif-extra EXTRA=requirements.txt" >&2; exit 2; }
	lock=$$(UV=$(UV) containers/lock-extra $(STACK) $(EXTRA)) && \
	  $(APPTAINER) build --force --build-arg CA=$(abspath $(SIF_CA)) --build-arg SIF_BASE=$(abspath $(SIF_BASE)) \
	  --build-arg STACK=$(STACK) --build-arg LOCK=$$(realpath $$lock) $(SIF_EXTRA) containers/extra.def

smoke:  ## smoke-test IMAGE on one GPU (SMOKE_DEVICE=cpu: on CPU; RUNTIME=apptainer ...); report in $(SMOKE_OUT)
	mkdir -p $(SMOKE_OUT)
	words=$$($(SMOKE_WORDS)) && mapfile -t run <<<"$$words" && set -x && \
	  "$${run[@]}" zerokit smoke --device $(SMOKE_DEVICE) --output $(abspath $(SMOKE_OUT))

clean:  ## remove the environment and build outputs (not runs/)
	rm -rf $(VENV) build
