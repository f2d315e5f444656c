# toolchat's production image: the ASGI web server by default; the Celery
# worker and the migrate step run the same image with another command (see
# docker-compose.yml).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=project.settings.base \
    PYTHONPATH=/app

WORKDIR /app

# Dependencies first, in their own layer, so that a code change does not
# reinstall them: with only the metadata present, `pip install .` installs
# every dependency and no code. The code runs from /app (PYTHONPATH), where
# settings find templates/ and static/ beside it.
COPY pyproject.toml README.md ./
RUN pip install .

COPY . .

# Static files are collected (hashed and compressed) at build time and served
# by ServeStatic. collectstatic needs settings but no secret and no database.
RUN DJANGO_SECRET_KEY=collectstatic-only-not-a-secret DJANGO_DEBUG=0 \
    python manage.py collectstatic --noinput

# Never run as root.
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /app toolchat
USER toolchat

EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz/', timeout=4).status == 200 else 1)"]

# Django's ASGI handler has no lifespan support, so uvicorn skips that protocol. An idle
# kept-alive connection is closed by its client or proxy first (docs/deploy.md).
CMD ["uvicorn", "project.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "off", "--timeout-keep-alive", "65"]
