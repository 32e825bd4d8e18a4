# Provely production image: every service (ingress, observer, verdict, sweeper, sandbox) runs
# from this one image with a different command; configuration comes from PROVELY_* variables.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY requirements/base.txt ./requirements/base.txt
COPY shared ./shared
COPY services ./services
# provely_sdk (sdk/python): `provely mcp` calls the API through it.
COPY sdk/python ./sdk/python
# The shipped contracts (signed skills) and publisher keys: package data of the wheel.
COPY contracts ./contracts
# The dependencies are the lock's exact versions, checked against their hashes (scripts/lock).
RUN python -m pip wheel --wheel-dir /wheels --require-hashes -r requirements/base.txt \
    && python -m pip wheel --wheel-dir /wheels --no-deps . ./sdk/python

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PROVELY_DATA_DIR=/var/lib/provely \
    PROVELY_LOG_JSON=true
RUN groupadd --system --gid 10001 provely \
    && useradd --system --uid 10001 --gid provely --home-dir /var/lib/provely \
       --shell /usr/sbin/nologin provely \
    && mkdir -p /var/lib/provely \
    && chown provely:provely /var/lib/provely
COPY --from=build /wheels /wheels
RUN python -m pip install /wheels/*.whl && rm -rf /wheels
RUN provely contracts list >/dev/null
USER provely:provely
WORKDIR /var/lib/provely
EXPOSE 8080 9100
# Each compose service overrides this; the ingress is the default.
CMD ["provely", "serve", "ingress", "--host", "0.0.0.0", "--port", "8080", "--workers", "4"]
