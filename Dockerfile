# One image for every Jobdesk process: `jobdesk migrate`, `jobdesk serve`, `jobdesk worker`
# (docker-compose.yml runs them as separate services so web and workers scale apart).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JOBDESK_DATA_DIR=/data

WORKDIR /srv/jobdesk

# Dependencies first (cached while only the code changes).
COPY pyproject.toml README.md ./
RUN mkdir -p app && touch app/__init__.py && pip install . && pip uninstall -y jobdesk

# The code. Installed editable: migrations/, templates/ and static/ are found next to app/.
COPY app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
COPY examples ./examples
COPY worker.py ./
# Byte-compiled here, once: with PYTHONDONTWRITEBYTECODE (and a tree the jobdesk user cannot write) every
# process would otherwise compile each module of app/ from source as it starts, worker and CLI alike.
RUN pip install --no-deps -e . \
    && python -m compileall -q app migrations \
    && useradd --system --create-home --home-dir /home/jobdesk jobdesk \
    && mkdir -p /data && chown jobdesk /data

USER jobdesk
VOLUME ["/data"]
EXPOSE 8000
CMD ["jobdesk", "serve", "--host", "0.0.0.0", "--port", "8000"]
