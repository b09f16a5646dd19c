# syntax=docker/dockerfile:1
# convsel's HTTP service: FastAPI under uvicorn, the numpy backend, PoCL's CPU OpenCL driver
# (the pocl-binary-distribution wheel that convsel depends on, x86_64/aarch64), the onnx extra
# (POST /v1/plan), the postgres extra (CONVSEL_TUNING_DB=postgresql://... for replicas sharing
# one store) and the learn extra (LightGBM, the predicted policy's gbt models). Versions come
# from constraints.txt, the same pins scripts/setup.sh installs.
#   docker build -t convsel .
#   docker run --rm -p 8000:8000 -v convsel-tuning:/data convsel
# The SQLite tuning store lives in the /data volume, so measurements outlive the container.
# Settings come from CONVSEL_* variables (service/config.py), e.g. -e CONVSEL_WORKERS=2,
# -e CONVSEL_API_TOKEN=... (guards /v1/tune and /metrics),
# -e CONVSEL_TUNING_DB=postgresql://user:password@host/db (a shared store instead).

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/convsel
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY convsel ./convsel
COPY service ./service
RUN /opt/convsel/bin/pip install --no-cache-dir -c constraints.txt \
        ".[opencl,service,onnx,postgres,learn]"

FROM python:3.11-slim
ENV PATH=/opt/convsel/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CONVSEL_HOST=0.0.0.0 \
    CONVSEL_PORT=8000 \
    CONVSEL_TUNING_DB=/data/tuning.sqlite
# LightGBM's wheel links the system's OpenMP runtime (libgomp), which the slim image lacks;
# the version is whatever the base image's Debian release ships.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/convsel /opt/convsel
RUN groupadd --gid 10001 convsel \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin convsel \
    && mkdir -p /data \
    && chown 10001:10001 /data
VOLUME ["/data"]
USER 10001:10001
WORKDIR /home/convsel
EXPOSE 8000
# Readiness, not only liveness: /readyz answers 503 until the rules are loaded and every
# component's own check passes (it names the tuning store's state in its detail).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('CONVSEL_PORT', '8000'), timeout=4)"]
CMD ["convsel", "serve"]
