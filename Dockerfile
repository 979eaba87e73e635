# The Watchtower services image (stream-actor workers, projection/API workers, the CLI).
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
COPY watchtower ./watchtower
RUN pip install --no-cache-dir uv==0.13.9 \
 && uv pip sync --system requirements.lock \
 && uv pip install --system --no-deps .
ENV WATCHTOWER_HOME=/var/lib/watchtower
CMD ["watchtower", "--help"]
