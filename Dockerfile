# The image the chart runs: `speedtier` on Python 3.11, as user 10001 (the chart's runAsUser),
# on a read-only root filesystem with an emptyDir at /tmp (data dir, heartbeats, metrics).
#
#   make image                  # docker build -t speedtier:<version> . (setup.cfg's version)
#   docker build --build-arg EXTRAS=local-embeddings -t ... .   # with an extra
#
# The image is tagged with the package version, which is also the chart's appVersion (the tag
# the chart deploys by default); tests/unit/test_version.py keeps VERSION below equal to both.
#
# Stage 1 builds the package and its dependencies into a virtualenv; stage 2 copies only that
# virtualenv onto a fresh slim base, so no compiler, pip cache or source tree ships.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/speedtier
COPY pyproject.toml setup.cfg README.md ./
COPY shared ./shared
COPY router ./router
COPY tiers ./tiers
COPY services ./services
# A non-editable install: the package lands in the virtualenv's site-packages, compiled.
RUN /opt/speedtier/bin/pip install ".${EXTRAS:+[$EXTRAS]}"

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="speedtier" \
      org.opencontainers.image.version="${VERSION}"
ENV PATH=/opt/speedtier/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    SPEEDTIER_ENV=production \
    SPEEDTIER_DATA_DIR=/tmp/speedtier \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus-metrics
RUN groupadd --system --gid 10001 speedtier \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
       --shell /usr/sbin/nologin speedtier
COPY --from=build /opt/speedtier /opt/speedtier
USER 10001:10001
WORKDIR /tmp
# 8080: the internal API (speedtier api); 9191: GET /metrics of a worker pool or the scheduler.
EXPOSE 8080 9191
ENTRYPOINT ["speedtier"]
CMD ["api", "--host", "0.0.0.0", "--port", "8080"]
