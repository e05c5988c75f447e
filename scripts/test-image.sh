#!/usr/bin/env bash
# npm run test:image: the image built and run as a user would run it, and the
# README's compose walkthrough, on whatever container engine there is.
#
# - Engine: a running Docker daemon, else podman; as root on Debian, podman is
#   installed when missing. Without either it says why and skips (exit 0);
#   under CI=true every skip is a failure, with its reason.
# - Base image: node:26-slim is pulled; where no registry answers (these CI
#   machines), a local stand-in is made the way the official image is
#   (debootstrap trixie + the official Node.js binary from the npm registry).
# - Checks: a configuration error exits 1; uid 65532; a read-only root with
#   every capability dropped; /healthz and /readyz; a proxied request that the
#   example API accepts while the API alone answers 401; the HEALTHCHECK;
#   SIGTERM exits 0 within the grace period; what the image ships.
# - Compose: docker-compose.yml with its Keycloak service replaced, for the
#   run only, by the development token server (Keycloak's image cannot be
#   pulled here); the file itself is not changed.
#
# IMAGE_TEST_COMPOSE=0 skips the compose part; CONTAINER_ENGINE forces one.
set -euo pipefail
cd "$(dirname "$0")/.."

say () { echo "test:image: $*"; }
fail () { say "FAIL: $*" >&2; exit 1; }
skip () { [ "${CI:-}" = true ] && fail "$* (CI=true: a missing prerequisite is a failure)"; say "SKIPPED: $*"; exit 0; }
pass () { say "ok   $*"; }
# HTTP from the host with node, which is there whatever else is not
http_status () { node -e 'fetch(process.argv[1]).then((r) => console.log(r.status), () => console.log(0))' "$1"; }
http_body () { node -e 'fetch(process.argv[1]).then((r) => r.text()).then((t) => process.stdout.write(t), () => process.exit(1))' "$1"; }

BASE_IMAGE=node:26-slim
IMAGE=auth-sidecar:image-test
API_IMAGE=auth-sidecar-example-api:image-test
PREFIX=auth-sidecar-image-test
# loopback ports on the host, away from the defaults a developer may be using
PROXY=18080; ADMIN=19090; API=13000; TOKENS=18180

# --- the engine ---------------------------------------------------------------
engine="${CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null; then
    engine=podman
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing podman, runc and debootstrap from Debian"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        podman runc debootstrap podman-compose golang-github-containernetworking-plugin-dnsname >/dev/null; }; then
      skip "no Docker daemon and podman could not be installed"
    fi
    engine=podman
  else
    skip "no container engine: no running Docker daemon, no podman, and not root on Debian to install it"
  fi
fi

if [ "$engine" = podman ]; then
  # Debian's podman needs these without a systemd and with a hard open-files limit:
  # runc (crun refuses the hybrid cgroup layout), cgroupfs and file events
  # (no systemd), and ulimits within the hard limits.
  nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
  conf_dir=$(mktemp -d)
  cat > "$conf_dir/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF="$conf_dir/containers.conf"
  build_flags=(--format docker)   # the OCI format drops HEALTHCHECK
else
  build_flags=()
fi
say "engine: $engine ($($engine --version))"

cleanup () {
  set +e
  for c in $($engine ps -a --format '{{.Names}}' 2>/dev/null | grep "^$PREFIX"); do $engine rm -f "$c" >/dev/null 2>&1; done
  [ -n "${compose_file:-}" ] && $compose -f "$compose_file" -p "$PREFIX" down -v >/dev/null 2>&1
  [ -n "${tokens_pid:-}" ] && kill "$tokens_pid" 2>/dev/null
  [ -n "${conf_dir:-}" ] && rm -rf "$conf_dir"
}
trap cleanup EXIT

# --- the base image -------------------------------------------------------------
image_exists () { $engine image inspect "$1" >/dev/null 2>&1; }

make_stand_in () {
  command -v debootstrap >/dev/null || fail "cannot pull $BASE_IMAGE and debootstrap is not installed"
  local work arch mirror
  work=$(mktemp -d)
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) fail "no Node.js binary package for $(uname -m)" ;; esac
  # the Debian mirror apt uses (its URIs:/deb lines, not comments)
  mirror=$( { grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } \
    | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')
  mirror=${mirror:-http://deb.debian.org/debian}
  say "no registry: making a stand-in for $BASE_IMAGE (debootstrap trixie from $mirror, node-linux-$arch@26 from npm)"
  debootstrap --variant=minbase --include=libatomic1 trixie "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log"; fail "debootstrap failed"; }
  (cd "$work" && npm pack --silent "node-linux-$arch@26" "npm@11" >/dev/null)
  mkdir -p "$work/node" "$work/npm" "$work/rootfs/usr/local/lib/node_modules"
  tar -xzf "$work"/node-linux-"$arch"-*.tgz -C "$work/node"
  tar -xzf "$work"/npm-*.tgz -C "$work/npm"
  install -m 0755 "$work/node/package/bin/node" "$work/rootfs/usr/local/bin/node"
  mv "$work/npm/package" "$work/rootfs/usr/local/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
  # The official image has a user node (1000:1000).
  chroot "$work/rootfs" sh -c 'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node'
  # npm inside the build reaches the registry through this machine's CAs
  # (only npm's setting: the product image gets no extra trust from it).
  local cafile; cafile=$(npm config get cafile 2>/dev/null || true)
  if [ -n "$cafile" ] && [ "$cafile" != null ] && [ -f "$cafile" ]; then
    mkdir -p "$work/rootfs/usr/local/etc" "$work/rootfs/etc/ssl/certs"
    cp "$cafile" "$work/rootfs/etc/ssl/certs/host-ca.pem"
    echo "cafile=/etc/ssl/certs/host-ca.pem" > "$work/rootfs/usr/local/etc/npmrc"
  fi
  rm -rf "$work/rootfs/var/cache/apt/archives"/*.deb "$work/rootfs/var/lib/apt/lists"/*
  tar -C "$work/rootfs" -c . | $engine import --change 'CMD ["node"]' - "docker.io/library/$BASE_IMAGE" >/dev/null
  rm -rf "$work"
}

if ! image_exists "$BASE_IMAGE"; then
  if ! timeout 120 $engine pull -q "docker.io/library/$BASE_IMAGE" >/dev/null 2>&1; then
    make_stand_in
  fi
fi
pass "base image $BASE_IMAGE: $($engine run --rm --no-healthcheck "$BASE_IMAGE" node --version)"

# --- the images -----------------------------------------------------------------
build () { $engine build "${build_flags[@]}" -q -t "$@" >/tmp/$PREFIX-build.log 2>&1 || { tail -30 /tmp/$PREFIX-build.log; return 1; }; }
build "$IMAGE" . || fail "the image does not build"
build "$API_IMAGE" deploy/example-api || fail "deploy/example-api does not build"
size=$($engine image inspect "$IMAGE" --format '{{.Size}}')
base_size=$($engine image inspect "$BASE_IMAGE" --format '{{.Size}}')
pass "built $IMAGE: $((size / 1000000)) MB, of which $(( (size - base_size) / 1000000 )) MB on top of the base"

# --- what the image ships ---------------------------------------------------------
shipped=$($engine run --rm --no-healthcheck --entrypoint sh "$IMAGE" -c 'cd /app && find . -type f | sort')
echo "$shipped" | sed 's/^/    /'
# the bundle, its chunks (*.js) and their licences (*.LEGAL.txt), and package.json
unexpected=$(echo "$shipped" | grep -Ev '^\./dist/main\.js$|^\./dist/chunks/[A-Za-z0-9_-]+\.js(\.LEGAL\.txt)?$|^\./package\.json$' || true)
[ -z "$unexpected" ] && echo "$shipped" | grep -qx './dist/main.js' \
  || fail "the image ships other files than the bundle, its chunks, their licences and package.json: $unexpected"
pass "ships the bundle, its chunks, their licences and package.json only: no demo, no development token server, no source maps, no node_modules"

# --- refuses a bad configuration, as 65532 ------------------------------------------
set +e
out=$($engine run --rm --no-healthcheck --read-only "$IMAGE" 2>&1); code=$?
set -e
[ "$code" = 1 ] && grep -q 'BASE_URL is required' <<< "$out" || { echo "$out"; fail "a configuration error should exit 1 naming BASE_URL (got $code)"; }
pass "configuration error: exit 1, $(echo "$out" | head -1 | cut -c1-100)..."
uid=$($engine run --rm --no-healthcheck --entrypoint id "$IMAGE" -u)
[ "$uid" = 65532 ] || fail "runs as uid $uid, not 65532"
pass "runs as uid 65532"

# --- a running sidecar: token server on the host, API and sidecar in containers ------
# Host networking keeps everything on this machine's loopback.
PORT=$TOKENS TOKEN_SECONDS=30 REFRESH_SECONDS=120 node dist/dev/token-server.js > /tmp/$PREFIX-tokens.json &
tokens_pid=$!
for _ in $(seq 1 50); do [ -s /tmp/$PREFIX-tokens.json ] && break; sleep 0.1; done
issuer="http://127.0.0.1:$TOKENS/auth/realms/service-realm"

# (podman without systemd reports that it cannot schedule health checks: stderr dropped)
$engine run -d --name "$PREFIX-api" --network host -e PORT=$API -e ISSUER="$issuer" "$API_IMAGE" >/dev/null 2>&1
read_only=(--read-only)
[ "$engine" = podman ] && read_only+=(--read-only-tmpfs=false)   # podman's --read-only still mounts a writable /tmp
$engine run -d --name "$PREFIX-sidecar" --network host "${read_only[@]}" --cap-drop ALL --security-opt no-new-privileges \
  -e BASE_URL="http://127.0.0.1:$API" -e AUTH_URL="http://127.0.0.1:$TOKENS" -e AUTH_CLIENT_ID=legacy-app \
  -e AUTH_USERNAME=service-user -e AUTH_PASSWORD=service-password \
  -e PROXY_PORT=$PROXY -e ADMIN_PORT=$ADMIN -e ADMIN_HOST=127.0.0.1 -e SHUTDOWN_GRACE_MS=5000 -e LOG_LEVEL=debug \
  "$IMAGE" >/dev/null 2>&1

ready=
for _ in $(seq 1 100); do
  if [ "$(http_status "http://127.0.0.1:$ADMIN/readyz")" = 200 ]; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { $engine logs "$PREFIX-sidecar"; fail "/readyz never answered 200"; }
[ "$(http_status "http://127.0.0.1:$ADMIN/healthz")" = 200 ] || fail "/healthz"
pass "/healthz and /readyz answer 200"

read_only_fs=$($engine inspect "$PREFIX-sidecar" --format '{{.HostConfig.ReadonlyRootfs}}')
[ "$read_only_fs" = true ] || fail "the root filesystem is not read-only"
# the process's own view: no capability in its bounding or effective set
caps=$($engine exec "$PREFIX-sidecar" sh -c 'grep -E "^Cap(Bnd|Eff):" /proc/1/status' | awk '{print $2}' | sort -u)
[ "$caps" = 0000000000000000 ] || fail "capabilities left: $caps"
if $engine exec "$PREFIX-sidecar" sh -c 'echo x > /tmp/x || echo x > /app/x' 2>/dev/null; then fail "the root filesystem is writable"; fi
pass "read-only root filesystem, all capabilities dropped, and it runs"

through=$(http_body "http://127.0.0.1:$PROXY/hello")
grep -q '"caller": "service-user"' <<< "$through" || { echo "$through"; fail "the example API did not accept the proxied request"; }
direct=$(http_status "http://127.0.0.1:$API/hello")
[ "$direct" = 401 ] || fail "the API alone answered $direct, not 401"
pass "through the sidecar the example API answers 200 for service-user; alone it answers 401"

if [ "$engine" = podman ]; then
  $engine healthcheck run "$PREFIX-sidecar" >/dev/null || fail "the HEALTHCHECK fails"
  health=healthy
else
  health=
  for _ in $(seq 1 30); do
    health=$($engine inspect "$PREFIX-sidecar" --format '{{.State.Health.Status}}')
    [ "$health" = healthy ] && break; sleep 1
  done
fi
[ "$health" = healthy ] || fail "the HEALTHCHECK says $health"
pass "HEALTHCHECK: healthy"

started=$(date +%s%N)
$engine stop -t 15 "$PREFIX-sidecar" >/dev/null 2>&1
took_ms=$(( ($(date +%s%N) - started) / 1000000 ))
exit_code=$($engine inspect "$PREFIX-sidecar" --format '{{.State.ExitCode}}')
[ "$exit_code" = 0 ] || { $engine logs "$PREFIX-sidecar" | tail -5; fail "SIGTERM: exit $exit_code"; }
[ "$took_ms" -lt 5000 ] || fail "SIGTERM: took $took_ms ms, beyond SHUTDOWN_GRACE_MS=5000"
logs=$($engine logs "$PREFIX-sidecar" 2>&1)   # whole, not piped into grep -q (pipefail and SIGPIPE)
grep -q '"event":"logout","outcome":"success"' <<< "$logs" || { echo "$logs" | tail -5; fail "the session was not ended on SIGTERM"; }
pass "SIGTERM: exit 0 in $took_ms ms (grace 5000 ms), session ended"
$engine rm -f "$PREFIX-sidecar" "$PREFIX-api" >/dev/null 2>&1
kill "$tokens_pid"; tokens_pid=

# --- the compose walkthrough ------------------------------------------------------
if [ "${IMAGE_TEST_COMPOSE:-1}" = 0 ]; then skip "compose walkthrough (IMAGE_TEST_COMPOSE=0)"; fi
if [ "$engine" = docker ] && docker compose version >/dev/null 2>&1; then
  compose="docker compose"
elif command -v podman-compose >/dev/null; then
  compose=podman-compose
else
  skip "compose walkthrough: neither docker compose nor podman-compose"
fi
compose_file=$(mktemp --suffix=.yml -p "$PWD" .compose-image-test-XXXX)
trap 'rm -f "$compose_file"; cleanup' EXIT
node scripts/compose-stand-in.mjs docker-compose.yml "$BASE_IMAGE" > "$compose_file"
$compose -f "$compose_file" -p "$PREFIX" up -d --build >/tmp/$PREFIX-compose.log 2>&1 || { tail -30 /tmp/$PREFIX-compose.log; fail "compose up"; }
ready=
for _ in $(seq 1 150); do
  if [ "$(http_status http://127.0.0.1:9090/readyz)" = 200 ]; then ready=1; break; fi
  sleep 0.4
done
[ -n "$ready" ] || { $compose -f "$compose_file" -p "$PREFIX" logs 2>&1 | tail -40; fail "compose: the sidecar never became ready"; }
through=$(http_body http://127.0.0.1:8080/hello)
grep -q '"caller": "service-user"' <<< "$through" || { echo "$through"; fail "compose: curl through the sidecar"; }
direct=$(http_status http://127.0.0.1:3000/hello)
[ "$direct" = 401 ] || fail "compose: the API alone answered $direct, not 401"
pass "compose walkthrough (token server standing in for Keycloak): curl through the sidecar 200, the API alone 401"
