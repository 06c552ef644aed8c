# Two images from one file:
#   --target daemon    (default) the controller and broker daemons and the CLI: Python and the core packages
#   --target notebook  adds PySpark with Java 17, the analytics, JupyterLab and the Kafka clients
# BASE_IMAGE is a Debian bookworm image; pass a local one where no image registry is reachable
# (scripts/compose-test builds one with debootstrap). Python packages come at the exact versions of
# constraints.txt, installed before the source is copied, so a code change rebuilds only the last layers.
ARG BASE_IMAGE=debian:bookworm-20250520-slim

FROM ${BASE_IMAGE} AS python
ARG DEBIAN_FRONTEND=noninteractive
# PEM certificates to trust besides Debian's, for networks whose proxy inspects TLS (empty: none).
ARG EXTRA_CA_CERTS=""
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" > /usr/local/share/ca-certificates/extra.crt && update-ca-certificates; \
    fi
# /data and /metrics owned by the daemons' user, so named volumes mounted there start out writable.
RUN python3 -m venv /opt/venv \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/epochkraft epochkraft \
    && install -d -o epochkraft -g epochkraft /data /metrics
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8
WORKDIR /opt/epochkraft
COPY constraints.txt pyproject.toml ./
# The requirements of the given extras, read from pyproject.toml (the project's own name left out).
RUN printf '%s\n' \
    'import sys, tomllib' \
    'project = tomllib.load(open("pyproject.toml", "rb"))["project"]' \
    'wanted = project["dependencies"] + [r for e in sys.argv[1:] for r in project["optional-dependencies"][e]]' \
    'print("\n".join(r for r in wanted if not r.startswith("epochkraft")))' > /tmp/requirements.py

FROM python AS daemon
RUN python3 /tmp/requirements.py > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt setuptools
COPY README.md ./
COPY epochkraft ./epochkraft
COPY config ./config
RUN pip install --no-deps --no-build-isolation . && rm -rf build
USER epochkraft
ENTRYPOINT ["epochkraft"]

FROM python AS notebook
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17
ENV JAVA_HOME=/usr/lib/jvm/java-17
RUN python3 /tmp/requirements.py analytics notebook clients > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt setuptools
COPY README.md ./
COPY epochkraft ./epochkraft
COPY config ./config
RUN pip install --no-deps --no-build-isolation . && rm -rf build
COPY --chown=epochkraft:epochkraft notebooks /home/epochkraft/notebooks
USER epochkraft
WORKDIR /home/epochkraft
ENTRYPOINT ["epochkraft"]
