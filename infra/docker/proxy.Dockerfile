# cmp-offload proxy: the sidecar that replaces argocd-cmp-server in the argocd-repo-server pod
# (distributed mode: it runs no plugin tools, so the image stays small).
# Build from the repository root:
#   docker build -f infra/docker/proxy.Dockerfile -t ghcr.io/cmp-offload/cmp-offload-proxy:0.1.0 .
# (proxy.Dockerfile.dockerignore beside this file keeps node_modules, dist and .git out of the context.)

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
# `npm ci` runs the `prepare` script, which compiles the TypeScript to dist/.
# Only the runtime sources are copied, so `prepare` (tsc) compiles just them. No C compiler here:
# the proxy runs no plugin in distributed mode, so it needs no cmp-trace or cmp-reap (the build
# says so; standalone mode uses the worker image).
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:24-bookworm-slim
# Argo CD runs its plugin sidecars as uid 999 (user argocd, HOME /home/argocd).
RUN groupadd --gid 999 argocd && useradd --uid 999 --gid 999 --create-home --home-dir /home/argocd argocd \
 && mkdir -p /home/argocd/cmp-server/plugins /home/argocd/cmp-server/config && chown -R 999:999 /home/argocd
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
ENV NODE_ENV=production
USER 999:999
# /healthz, /readyz and /metrics (CMP_OFFLOAD_HTTP_ADDR).
EXPOSE 9101
# Node 20's young-generation bound (16 MiB semi-spaces): Node 24's V8 grows it further, and the
# proxy then held 190 MiB more RSS after test/reliability's hostile-input run (with it, 134-165).
ENTRYPOINT ["node", "--max-semi-space-size=16", "/app/bin/cmp-offload"]
CMD ["proxy"]
