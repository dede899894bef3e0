#!/bin/sh
# Build the statically linked teamster binary and the image teamster:dev, with no registry.
#
#   deploy/build-image.sh            # build (incremental), tag teamster:dev
#   IMAGE=teamster:test deploy/build-image.sh
#
# Environment:
#   IMAGE        image name and tag (default teamster:dev)
#   PROFILE      cargo profile for the binary (default release)
#   BUSYBOX      path of a statically linked busybox to use instead of Debian's busybox-static
#   SKIP_CARGO=1 use the binary already built (the compose tests: the one they run)
#   BIN          that binary's path (default: the profile's, under target/)
#
# Incremental: the image carries a label with a hash of everything that goes into it
# (Dockerfile, busybox, the binary, the /etc files); when the image already has that label
# the docker build is skipped. Cargo itself is incremental.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${IMAGE:-teamster:dev}
PROFILE=${PROFILE:-release}
TARGET=x86_64-unknown-linux-gnu
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
CACHE=$TARGET_DIR/image-cache
STAGE=$TARGET_DIR/image-context
# Cargo keeps the dev profile's artifacts under `debug`.
PROFILE_DIR=$PROFILE
[ "$PROFILE" = dev ] && PROFILE_DIR=debug
BIN=${BIN:-$TARGET_DIR/$TARGET/$PROFILE_DIR/teamster}

log() { echo "build-image: $*" >&2; }

# 1. The static binary. The explicit --target keeps RUSTFLAGS off build scripts and
#    proc-macros (they must stay dynamic); only target artifacts get +crt-static. The same
#    target and flags are every build's (.cargo/config.toml), so this shares the
#    artifacts of `cargo build` and `cargo test`.
if [ "${SKIP_CARGO:-0}" != 1 ]; then
    start=$(date +%s)
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --manifest-path "$ROOT/Cargo.toml" -p teamster --bin teamster \
        --profile "$PROFILE" --target "$TARGET" --locked
    log "cargo build (profile $PROFILE) took $(( $(date +%s) - start ))s"
fi
[ -x "$BIN" ] || { log "missing $BIN"; exit 1; }
# A static(-pie) binary has no "lib => path" lines in ldd's answer.
if command -v ldd >/dev/null 2>&1 && ldd "$BIN" 2>&1 | grep -q '=>'; then
    log "$BIN is dynamically linked; refusing to put it in a scratch image"
    exit 1
fi

# 2. busybox: Debian's busybox-static, downloaded once from the package mirror (not a
#    container registry) and cached.
mkdir -p "$CACHE"
if [ -n "${BUSYBOX:-}" ]; then
    bb=$BUSYBOX
else
    bb=$CACHE/busybox
    if [ ! -x "$bb" ]; then
        log "fetching busybox-static with apt-get download"
        (cd "$CACHE" && rm -rf bb ./*.deb && apt-get download busybox-static >&2 \
            && dpkg -x busybox-static_*.deb bb && cp bb/bin/busybox "$bb" && rm -rf bb ./*.deb)
    fi
fi
[ -x "$bb" ] || { log "no busybox at $bb"; exit 1; }

# 3. The build context: a small staging directory, never the repository.
rm -rf "$STAGE"
mkdir -p "$STAGE/etc"
cp "$ROOT/deploy/Dockerfile" "$STAGE/Dockerfile"
cp "$bb" "$STAGE/busybox"
# Without its debug information (a test build carries line tables): a smaller context and
# image, the same program.
if command -v strip >/dev/null 2>&1; then
    strip --strip-debug -o "$STAGE/teamster" "$BIN"
else
    cp "$BIN" "$STAGE/teamster"
fi
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$STAGE/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$STAGE/etc/group"

hash=$(cd "$STAGE" && cat Dockerfile busybox teamster etc/passwd etc/group | sha256sum | cut -c1-32)
current=$(docker image inspect --format '{{ index .Config.Labels "io.teamster.build-hash" }}' \
    "$IMAGE" 2>/dev/null || true)
if [ "$current" = "$hash" ]; then
    log "$IMAGE is up to date ($hash)"
    exit 0
fi

# 4. The image. The classic builder needs nothing from a registry for FROM scratch.
start=$(date +%s)
DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build --quiet --build-arg "BUILD_HASH=$hash" \
    -t "$IMAGE" "$STAGE" >&2
log "built $IMAGE ($hash) in $(( $(date +%s) - start ))s"
