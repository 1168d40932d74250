# cmp-offload worker base image: runs `cmp-offload worker` or `cmp-offload runner` (the worker pod runs
# it twice: the worker holds the credentials, the runner runs the plugin's commands and holds none)
# under tini as PID 1, so that plugin commands' orphaned children are reaped and signals reach
# node (argocd-cmp-server has its own zombie reaper; a Node process does not).
# Build from the repository root:
#   docker build -f infra/docker/worker.Dockerfile -t ghcr.io/cmp-offload/cmp-offload-worker:0.1.0 .
# It carries no plugin tools: build your own image FROM it and add them (see
# worker-helm-kustomize.Dockerfile). The same image also serves as the sidecar in standalone
# mode (`cmp-offload proxy` without CMP_OFFLOAD_REDIS_URL), where the proxy runs the plugin itself.

FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.json ./
COPY proxy ./proxy
COPY worker ./worker
COPY runner ./runner
COPY keeper ./keeper
COPY cli ./cli
COPY cmp ./cmp
COPY bin ./bin
COPY proto ./proto
# gcc compiles, into dist/ (build stage only), cmp-trace (the traced cache's read recorder) and
# cmp-reap (the subreaper that lets timeouts, cancel and shutdown kill plugin processes that left
# their process group; without it they would survive: see docs/argo-contract.md#process-cleanup).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
# Only the runtime sources are copied, so `prepare` (tsc, then cc) compiles just them.
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:24-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 999 argocd && useradd --uid 999 --gid 999 --create-home --home-dir /home/argocd argocd \
 && mkdir -p /home/argocd/cmp-server/config && chown -R 999:999 /home/argocd
WORKDIR /app
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/bin ./bin
COPY --from=build /src/proto ./proto
# `argocd` on the PATH is the git askpass helper Argo's repo-server names for plugins with
# provideGitCreds (GIT_ASKPASS=argocd, ARGOCD_BINARY_NAME=argocd-git-ask-pass): ours, which
# asks the same askpass socket. It is no Argo CD CLI.
RUN ln -s /app/bin/git-askpass/argocd /usr/local/bin/argocd
ENV NODE_ENV=production HOME=/home/argocd
USER 999:999
WORKDIR /home/argocd
# /healthz, /readyz, /metrics and the optional dashboard (CMP_OFFLOAD_HTTP_ADDR).
EXPOSE 9102
# Node 20's young-generation bound (16 MiB semi-spaces): Node 24's V8 grows it further, and the
# proxy then held 190 MiB more RSS after test/reliability's hostile-input run (with it, 134-165).
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--max-semi-space-size=16", "/app/bin/cmp-offload"]
CMD ["worker"]
