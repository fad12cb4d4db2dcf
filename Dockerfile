# zerokit image: one pinned stack (containers/stacks/$STACK.toml), DeepSpeed's ops prebuilt and gated.
# Build it with `make image STACK=cpu` (BuildKit): the Makefile turns the stack into the build
# arguments below, and hands in the site CA file and wheelhouse as mounts, never as layers.
# Reproducible (`make verify-reproducible`): SOURCE_DATE_EPOCH is the commit's time; .pyc files are
# hash-based (no build-time stamps), and dpkg's and apt's logs and caches are left out.
ARG BASE_IMAGE=debian:bookworm-slim
ARG SOURCE_DATE_EPOCH=0

# ---- system: what every stage and the runtime need ------------------------------------------
FROM ${BASE_IMAGE} AS system
ARG APT_RUNTIME
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
RUN --mount=type=bind,source=containers/drop-build-stamps,target=/usr/local/sbin/drop-build-stamps \
    test -n "$APT_RUNTIME" || { echo "APT_RUNTIME is empty: build with make image" >&2; exit 1; } \
 && apt-get update && apt-get install -y --no-install-recommends $APT_RUNTIME \
 && drop-build-stamps

# ---- build: the venv from the lock, DeepSpeed's wheel with the stack's ops ------------------
FROM system AS build
ARG APT_BUILD
RUN --mount=type=bind,source=containers/drop-build-stamps,target=/usr/local/sbin/drop-build-stamps \
    apt-get update && apt-get install -y --no-install-recommends $APT_BUILD && drop-build-stamps
ARG STACK=cpu
WORKDIR /opt/zerokit
# Only what the install scripts read, so a change elsewhere keeps these layers cached.
COPY containers/site-env containers/install-lock containers/build-ds-wheel containers/portable-cc containers/cuda-home \
     containers/system-cuda-home containers/
COPY containers/stacks/ containers/stacks/
COPY containers/lock/${STACK}.txt containers/lock/
COPY src/zerokit/__init__.py src/zerokit/
COPY src/zerokit/foundations/__init__.py src/zerokit/foundations/errors.py src/zerokit/foundations/paths.py \
     src/zerokit/foundations/
COPY src/zerokit/image/__init__.py src/zerokit/image/stack.py src/zerokit/image/
RUN --mount=type=secret,id=site_ca --mount=type=bind,source=build/wheelhouse,target=/wheelhouse \
    python3 -m venv /opt/venv \
 && containers/site-env containers/install-lock /opt/venv/bin/python "$STACK"
# The wheel `make venv` built (build/wheels/$STACK) is reused when present: the ops compile once.
RUN --mount=type=secret,id=site_ca --mount=type=bind,source=build/wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=build/wheels,target=/prebuilt \
    mkdir -p /tmp/dswheel \
 && prebuilt=/prebuilt/"$STACK"/deepspeed-$(PYTHONPATH=src python3 -m zerokit.image.stack "$STACK" version deepspeed)-*.whl \
 && if ls $prebuilt >/dev/null 2>&1; then echo "reusing" $prebuilt; cp $prebuilt /tmp/dswheel/; \
    else containers/site-env containers/build-ds-wheel /opt/venv/bin/python "$STACK" /tmp/dswheel; fi \
 && /opt/venv/bin/python -m pip install --no-deps --no-cache-dir --no-compile /tmp/dswheel/deepspeed-*.whl \
 && rm -rf /tmp/dswheel \
 && find /opt/venv -path '*/deepspeed/ops/*' -name '*.so' -exec strip --strip-debug {} + \
 && echo /opt/zerokit/src > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zerokit.pth" \
 && PYTHONHASHSEED=0 /opt/venv/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
    "$(/opt/venv/bin/python -c 'import deepspeed, os; print(os.path.dirname(deepspeed.__file__))')" >/dev/null

# ---- sbomtool: the SBOM generator (containers/lock/sbom.txt), mounted into the runtime's build only --
FROM system AS sbomtool
COPY containers/site-env containers/lock/sbom.txt /opt/sbomtool/
RUN --mount=type=secret,id=site_ca python3 -m venv /opt/sbomtool/venv \
 && /opt/sbomtool/site-env /opt/sbomtool/venv/bin/python -m pip install --no-deps --no-cache-dir --require-hashes \
    -r /opt/sbomtool/sbom.txt

# ---- runtime: the venv, zerokit, entrypoints; no compilers ---------------------------------
FROM system AS runtime
ARG STACK=cpu
# Ubuntu's images (nvidia-base) come with a user `ubuntu` of uid 1000: zerokit takes the uid.
# The password's last-change day is left empty: it would be the build's date.
RUN if getent passwd ubuntu >/dev/null; then userdel --remove ubuntu; fi \
 && useradd --create-home --uid 1000 zerokit \
 && sed -i 's/^\(zerokit:[^:]*:\)[0-9]*:/\1:/' /etc/shadow \
 && mkdir -p /etc/zerokit /data/huggingface && chmod 1777 /data /data/huggingface
COPY --from=build /opt/venv /opt/venv
ARG DS_ACCELERATOR=cpu
# Set late: it changes with every commit, and layers above it stay cached.
ARG IMAGE_ID=dev
# Caches: node-local (/tmp) and specific to this image, so two images never share compiled code.
ENV PATH=/opt/venv/bin:$PATH \
    ZEROKIT_HOME=/opt/zerokit \
    ZEROKIT_STACK=${STACK} \
    ZEROKIT_PYTHON=/opt/venv/bin/python \
    DS_ACCELERATOR=${DS_ACCELERATOR} \
    TORCH_EXTENSIONS_DIR=/tmp/zerokit-${IMAGE_ID}/torch_extensions \
    TRITON_CACHE_DIR=/tmp/zerokit-${IMAGE_ID}/triton \
    HF_HOME=/data/huggingface
COPY containers/stacks/ /opt/zerokit/containers/stacks/
COPY containers/lock/ /opt/zerokit/containers/lock/
COPY configs/ /opt/zerokit/configs/
COPY entrypoints/ /usr/local/bin/
COPY src/ /opt/zerokit/src/
# The hard gate: every op the stack asks for is prebuilt and loads, or the build fails here; then
# doctor's report of the image as built (/dev/shm left out: a build container gets only 64 MB).
RUN zerokit ops-gate "$STACK" \
 && { zerokit doctor --strict --json --skip shm > /etc/zerokit/build-report.json \
      || { cat /etc/zerokit/build-report.json; exit 1; }; }
# What the image knows about itself (zerokit-run.json of every run in it quotes this), and its bill of
# materials from what is really installed: the venv's metadata and dpkg's database (zerokit.image.sbom).
ARG BASE_IMAGE
ARG IMAGE_TAG=
ARG SOURCE_DATE_EPOCH
RUN --mount=type=bind,from=sbomtool,source=/opt/sbomtool,target=/opt/sbomtool \
    --mount=type=bind,source=containers/drop-build-stamps,target=/usr/local/sbin/drop-build-stamps \
    python -m zerokit.image.image_info write /etc/zerokit/image.json --stack "$STACK" --tag "$IMAGE_TAG" \
      --build-id "$IMAGE_ID" --base-image "$BASE_IMAGE" --source-date-epoch "$SOURCE_DATE_EPOCH" \
 && /opt/sbomtool/venv/bin/cyclonedx-py environment --output-reproducible --sv 1.6 \
      -o /etc/zerokit/sbom.cdx.json /opt/venv/bin/python \
 && python -m zerokit.image.sbom add-dpkg /etc/zerokit/sbom.cdx.json \
 && drop-build-stamps
LABEL io.zerokit.sbom=/etc/zerokit/sbom.cdx.json io.zerokit.sbom-format=CycloneDX-1.6-JSON \
      io.zerokit.image-info=/etc/zerokit/image.json
USER zerokit
WORKDIR /home/zerokit
CMD ["train", "--help"]
