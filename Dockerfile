# syntax=docker/dockerfile:1
# Marina's container image: `serve --foreground` as PID 1, compiled code only.
#
# Not built in CI: there is no container engine there. Its install steps are the ones
# test/packaging.test.ts runs on every CI run: `pnpm tarballs` packs the packages (tsc builds each
# one's dist/), then `npm install -g` installs the tarball with ONNXRUNTIME_NODE_INSTALL=skip.
#
#   docker build -t marina:0.1.0 .
#   docker run --rm -p 127.0.0.1:8080-8082:8080-8082 \
#     -v "$PWD/model_store:/home/marina/model-store:ro" -v "$PWD/config:/etc/marina:ro" marina:0.1.0

# Build stage: the workspace, its dev dependencies, tsc, and the packed tarballs.
FROM node:20-bookworm-slim AS build
WORKDIR /src
ENV ONNXRUNTIME_NODE_INSTALL=skip
COPY . .
RUN npx -y pnpm@10.34.9 install --frozen-lockfile \
 && npx -y pnpm@10.34.9 tarballs /packed

# Runtime stage: Node and the installed tarball (production dependencies only: no TypeScript, no tsx).
FROM node:20-bookworm-slim AS runtime
# MALLOC_MMAP_THRESHOLD_ set here means the server does not re-execute itself to set it: the
# process that handles SIGTERM is PID 1 itself.
ENV NODE_ENV=production \
    MALLOC_MMAP_THRESHOLD_=1048576 \
    ONNXRUNTIME_NODE_INSTALL=skip \
    LOG_LOCATION=/home/marina/logs
COPY --from=build /packed /tmp/packed
RUN npm install -g --no-audit --no-fund /tmp/packed/marina-cli-*.tgz \
 && rm -rf /tmp/packed /root/.npm \
 && groupadd --gid 10001 marina \
 && useradd --uid 10001 --gid marina --home-dir /home/marina --create-home --shell /usr/sbin/nologin marina \
 && mkdir -p /home/marina/model-store /home/marina/logs /etc/marina \
 && chown -R marina:marina /home/marina
USER 10001:10001
WORKDIR /home/marina
# The model store (.mar archives) and the configuration (config.properties; key_file.json for
# token_key_file, or let the server write its own keys to /home/marina/key_file.json).
VOLUME ["/home/marina/model-store", "/etc/marina"]
# Inference, management, metrics (HTTP), and gRPC inference (TorchServe's and the Open Inference
# Protocol's services) and management, as TorchServe's image has them. config.properties must bind
# 0.0.0.0 inside a container (grpc_inference_address / grpc_management_address for gRPC).
EXPOSE 8080 8081 8082 7070 7071
# SIGTERM (docker stop, Kubernetes): stop accepting, /ping 500, finish in-flight requests, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["serve", "--foreground"]
CMD ["--ts-config", "/etc/marina/config.properties"]
