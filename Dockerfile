# The epochkraft image: the daemons, the chaos tool and the PySpark analytics (Java for Spark).
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYTHONUNBUFFERED=1 \
    SPARK_LOCAL_IP=127.0.0.1

WORKDIR /opt/epochkraft
COPY pyproject.toml README.md ./
COPY epochkraft ./epochkraft
COPY config ./config
COPY notebooks ./notebooks
RUN pip install --no-cache-dir ".[analytics,clients]" jupyterlab

EXPOSE 9092 9093 9192 9193
ENTRYPOINT ["epochkraft"]
