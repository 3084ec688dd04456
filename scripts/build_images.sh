#!/usr/bin/env bash
# Builds the CPU image (deploy/docker/Dockerfile.cpu) where no registry can be
# reached, only Debian's package mirror:
#   1. the base image: Debian 12 made by `debootstrap --variant=minbase` and
#      `docker import`ed as $PAGODA_BASE_IMAGE (once; kept while it exists);
#   2. the image, Dockerfile.cpu's `prebuilt` target on that base: the runtime
#      libraries from the mirror and the binaries this host built, installed
#      with `cmake --install` into a context folder of their own.
# Why the host's binaries rather than Dockerfile.cpu's default target, which
# compiles inside the image: that is a second full build of the project, tens
# of minutes on a 2-core machine, where the image test must stay in minutes;
# the host is Debian 12 like the image, so its binaries link the same
# libraries (the Dockerfile's `ldd` check fails the build otherwise). The
# context is the installed prefix alone, not the repository with its build
# folders.
#
#   scripts/build_images.sh                 # uses build/, tags pagoda:0.1.0-cpu
#   BUILD_DIR=build PAGODA_IMAGE=pagoda:0.1.0-cpu scripts/build_images.sh
# Needs: a reachable Docker daemon, debootstrap (Debian package), root (for
# debootstrap, when the base image is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
PAGODA_IMAGE=${PAGODA_IMAGE:-pagoda:0.1.0-cpu}
PAGODA_BASE_IMAGE=${PAGODA_BASE_IMAGE:-pagoda-base/debian:bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The classic builder: Debian's docker.io has no buildx, and the Dockerfile
# orders its stages for it.
export DOCKER_BUILDKIT=0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make_base_image() {
  if docker image inspect "$PAGODA_BASE_IMAGE" >/dev/null 2>&1; then
    echo "build_images: base image $PAGODA_BASE_IMAGE exists"
    return
  fi
  command -v debootstrap >/dev/null || {
    echo "build_images: debootstrap is missing (apt-get install debootstrap)" >&2
    exit 1
  }
  echo "build_images: debootstrap bookworm from $DEBIAN_MIRROR"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$DEBIAN_MIRROR" >"$work/debootstrap.log" \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # What Debian's slim images leave out: downloaded packages and their lists,
  # and documentation but licences, now and in packages installed later (the
  # dpkg filter stays in the image).
  local root="$work/rootfs"
  printf 'path-exclude /usr/share/%s/*\n' doc man info locale lintian \
    >"$root/etc/dpkg/dpkg.cfg.d/pagoda-slim"
  echo 'path-include /usr/share/doc/*/copyright' >>"$root/etc/dpkg/dpkg.cfg.d/pagoda-slim"
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$root"/usr/share/{man,info,locale,lintian}/* "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
  tar -C "$root" -c . | docker import - "$PAGODA_BASE_IMAGE" >/dev/null
  rm -rf "$root"
}

# The CPU image has no CUDA toolkit, so its binaries must not link it. A host
# with nvcc builds the CUDA backend into $BUILD_DIR (the test command does),
# and then the image's three binaries are built once more without CUDA, in
# ${BUILD_DIR}-cpu-image (unity, the same compiler launcher).
image_build_dir() {
  cmake --build "$BUILD_DIR" --target pagoda-worker >/dev/null
  if ! ldd "$BUILD_DIR/bin/pagoda-worker" | grep -q libcudart; then
    echo "$BUILD_DIR"
    return
  fi
  local cpu_dir="${BUILD_DIR}-cpu-image"
  local launcher
  launcher=$(sed -n 's/^CMAKE_CXX_COMPILER_LAUNCHER[^=]*=//p' "$BUILD_DIR/CMakeCache.txt")
  echo "build_images: $BUILD_DIR links CUDA; the CPU image's binaries come from $cpu_dir" >&2
  cmake -S . -B "$cpu_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_ENABLE_CUDA=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
    ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher -DCMAKE_C_COMPILER_LAUNCHER=$launcher} \
    >/dev/null
  echo "$cpu_dir"
}

build_image() {
  local build_dir
  build_dir=$(image_build_dir)
  cmake --build "$build_dir" --target pagoda-server pagoda-worker pagoda-cli \
    pagoda_sentencepiece_shim >/dev/null
  cmake --install "$build_dir" --prefix "$work/context/opt/pagoda" >/dev/null
  # Debug symbols are not for the image.
  strip --strip-unneeded "$work"/context/opt/pagoda/bin/* "$work"/context/opt/pagoda/lib/*.so
  docker build --network host -q -f deploy/docker/Dockerfile.cpu --target prebuilt \
    --build-arg "DEBIAN_IMAGE=$PAGODA_BASE_IMAGE" -t "$PAGODA_IMAGE" "$work/context" >/dev/null
  echo "build_images: $PAGODA_IMAGE ($(docker image inspect -f '{{.Size}}' "$PAGODA_IMAGE") bytes)"
}

make_base_image
build_image
