# syntax=docker/dockerfile:1
# convsel's HTTP service: FastAPI under uvicorn, the numpy backend, PoCL's CPU OpenCL driver
# (the pocl-binary-distribution wheel that convsel depends on, x86_64/aarch64) and the onnx
# extra, so that POST /v1/plan works in the image.
#   docker build -t convsel .
#   docker run --rm -p 8000:8000 convsel
# Settings come from CONVSEL_* variables (service/config.py), e.g. -e CONVSEL_WORKERS=2,
# -e CONVSEL_API_TOKEN=... (guards /v1/tune and /metrics).

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/convsel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY convsel ./convsel
COPY service ./service
RUN /opt/convsel/bin/pip install --no-cache-dir ".[opencl,service,onnx]"

FROM python:3.11-slim
ENV PATH=/opt/convsel/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CONVSEL_HOST=0.0.0.0 \
    CONVSEL_PORT=8000
COPY --from=build /opt/convsel /opt/convsel
RUN groupadd --gid 10001 convsel \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin convsel
USER 10001:10001
WORKDIR /home/convsel
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CONVSEL_PORT', '8000'), timeout=4)"]
CMD ["convsel", "serve"]
