# A derived image: IMAGE (a stack's image) plus extra packages from their own hash-checked lock.
# Built by containers/build-extra-image (`make image EXTRA=requirements.txt`), not directly.
ARG IMAGE
FROM ${IMAGE}
ARG STACK=cpu
USER root
COPY extra.txt /opt/zerokit/containers/lock/extra.txt
# --no-deps: the lock is complete (the stack's pins included, already installed, so skipped).
# Then the gate: pip's dependency check, every op still loads, and doctor --strict finds every pin
# of the stack's lock (and of extra.txt) installed at its version.
RUN --mount=type=secret,id=site_ca --mount=type=bind,source=site-env,target=/tmp/site-env \
    /tmp/site-env /opt/venv/bin/python -m pip install --no-deps --require-hashes --no-cache-dir --no-compile \
      -r /opt/zerokit/containers/lock/extra.txt \
 && /opt/venv/bin/python -m pip check \
 && zerokit ops-gate "$STACK" \
 && { zerokit doctor --strict --json --skip shm > /etc/zerokit/build-report-extra.json \
      || { cat /etc/zerokit/build-report-extra.json; exit 1; }; }
USER zerokit
