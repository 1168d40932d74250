# Example plugin image: the cmp-offload worker base plus helm and kustomize: the tools are the
# runner's (the worker pod's container that runs plugin commands), and the same image serves the
# worker container too. Copy this file for your own tools: switch to root, install, switch back to uid 999. Pin versions and checksums
# (the official release pages publish them) so that a rebuilt image renders the same output,
# and set CMP_OFFLOAD_CACHE_SALT to the image tag so that a tool upgrade invalidates the cache.
# Build (no context needed):
#   docker build -f infra/docker/worker-helm-kustomize.Dockerfile \
#     --build-arg HELM_SHA256=<sha256 of the helm tarball> --build-arg KUSTOMIZE_SHA256=<sha256> \
#     -t registry.example.com/cmp-offload-worker-helm:0.1.0 - < infra/docker/worker-helm-kustomize.Dockerfile

ARG BASE=ghcr.io/cmp-offload/cmp-offload-worker:0.1.0
FROM ${BASE}
ARG HELM_VERSION=v3.16.4
ARG HELM_SHA256
ARG KUSTOMIZE_VERSION=v5.5.0
ARG KUSTOMIZE_SHA256
USER root
RUN set -eu; \
    apt-get update; apt-get install -y --no-install-recommends curl; \
    curl -fsSLo /tmp/helm.tgz "https://get.helm.sh/helm-${HELM_VERSION}-linux-amd64.tar.gz"; \
    echo "${HELM_SHA256}  /tmp/helm.tgz" | sha256sum -c -; \
    tar -xzf /tmp/helm.tgz -C /tmp linux-amd64/helm; install -m 0755 /tmp/linux-amd64/helm /usr/local/bin/helm; \
    curl -fsSLo /tmp/kustomize.tgz "https://github.com/kubernetes-sigs/kustomize/releases/download/kustomize%2F${KUSTOMIZE_VERSION}/kustomize_${KUSTOMIZE_VERSION}_linux_amd64.tar.gz"; \
    echo "${KUSTOMIZE_SHA256}  /tmp/kustomize.tgz" | sha256sum -c -; \
    tar -xzf /tmp/kustomize.tgz -C /usr/local/bin kustomize; chmod 0755 /usr/local/bin/kustomize; \
    apt-get purge -y curl; apt-get autoremove -y; rm -rf /var/lib/apt/lists/* /tmp/*
USER 999:999
