#!/usr/bin/env bash
# Prepares what tests/test_startup_script.py needs to run the worker startup script the way a
# fresh GCE debian-12 VM runs it, without the internet during the test:
#   ROOT_DIR                      a clean minimal Debian 12 root (debootstrap minbase) with what
#                                 GCE's debian-12 image has and the script relies on: python3,
#                                 curl, ca-certificates. Not python3-venv: the script installs it
#                                 with apt-get, so its .debs (and the apt lists) are fetched now.
#   ROOT_DIR/srv/wheelhouse       wheels of the host's exact pins (expo_executor.engines.gce.startup
#                                 .host_pins), for pip install --no-index --find-links.
# Then: EXPOCLOUD_DEBIAN_ROOT=ROOT_DIR pytest tests/test_startup_script.py
#
# Usage: tests/debian_root.sh ROOT_DIR        (as root; needs the Debian mirror and an index)
#   PYTHON               the interpreter that runs pytest (default python3): pins come from it
#   EXPOCLOUD_CACHE_DIR  if set, the root is cached there as a tarball and the wheels in a
#                        wheelhouse directory, so later runs need neither mirror nor index
#   DEBIAN_MIRROR        default http://deb.debian.org/debian
set -euo pipefail

ROOT=${1:?usage: tests/debian_root.sh ROOT_DIR}
PY=${PYTHON:-python3}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
INCLUDE=python3,curl,ca-certificates
PRELOAD=python3-venv  # downloaded only: installing it is the script's job
CACHE=${EXPOCLOUD_CACHE_DIR:-}
# Bump the recipe when the root's contents change: the cache key and the ready marker follow.
RECIPE="v1 $SUITE minbase include=$INCLUDE preload=$PRELOAD $(uname -m)"
KEY=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-16)
MARKER=.expocloud-debian-root

log() { printf '[debian_root %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

[ "$(id -u)" = 0 ] || { echo "tests/debian_root.sh: run as root (debootstrap, chroot)" >&2; exit 1; }
mkdir -p "$(dirname "$ROOT")"
ROOT=$(cd "$(dirname "$ROOT")" && pwd)/$(basename "$ROOT")

in_root() {  # in_root DIR CMD...: run CMD chrooted in DIR, /proc and /dev mounted in a private
  # mount namespace, so every mount vanishes with the command, even if it fails.
  local dir=$1
  shift
  unshare --mount --propagation private -- bash -c '
    set -e
    dir=$1; shift
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    chroot "$dir" "$@"' in_root "$dir" "$@"
}

build_root() {
  local tmp="$ROOT.tmp"
  if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    apt-get install -y --no-install-recommends debootstrap ||
      { apt-get update && apt-get install -y --no-install-recommends debootstrap; }
  fi
  rm -rf "$tmp"
  local start=$SECONDS
  log "debootstrap --variant=minbase --include=$INCLUDE $SUITE ($MIRROR)"
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$tmp" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
    { tail -30 "$ROOT.debootstrap.log" >&2; exit 1; }
  log "debootstrap took $((SECONDS - start)) s"
  # What the test must not fetch: the apt lists and the .debs of python3-venv.
  in_root "$tmp" apt-get clean
  in_root "$tmp" apt-get -q update
  in_root "$tmp" apt-get -q install -y --no-install-recommends --download-only "$PRELOAD"
  rm -f "$tmp/etc/resolv.conf"  # the host's; the test's root reaches only loopback
  printf '%s\n' "$KEY" >"$tmp/$MARKER"
  rm -rf "$ROOT"
  mv "$tmp" "$ROOT"
  log "root ready in $((SECONDS - start)) s"
}

start=$SECONDS
if [ "$(cat "$ROOT/$MARKER" 2>/dev/null)" = "$KEY" ]; then
  log "root $ROOT is ready"
elif [ -n "$CACHE" ] && [ -f "$CACHE/debian-root-$KEY.tar" ]; then
  log "unpacking cached root $CACHE/debian-root-$KEY.tar"
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
  tar --numeric-owner -xf "$CACHE/debian-root-$KEY.tar" -C "$ROOT"
else
  build_root
  if [ -n "$CACHE" ]; then
    mkdir -p "$CACHE"
    tar --numeric-owner -cf "$CACHE/debian-root-$KEY.tar.part" -C "$ROOT" .
    mv "$CACHE/debian-root-$KEY.tar.part" "$CACHE/debian-root-$KEY.tar"
    log "cached the root as $CACHE/debian-root-$KEY.tar"
  fi
fi

# The wheelhouse: every pin as a wheel. Wheels already at hand are not fetched again; a pin
# published only as an sdist is built into a wheel here, so the root needs no build backend.
STORE=${CACHE:+$CACHE/wheelhouse}
STORE=${STORE:-$ROOT/srv/wheelhouse}
mkdir -p "$STORE" "$ROOT/srv/wheelhouse"
wheel_start=$SECONDS
"$PY" - "$STORE" "$ROOT/srv/wheelhouse" <<'PY'
"""Fetch the missing wheels of the host's pins into the store, then copy the pinned ones."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

from expo_executor.engines.gce.startup import host_pins

store, target = Path(sys.argv[1]), Path(sys.argv[2])


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_of(pin: str) -> Path | None:
    name, _, version = pin.partition("==")
    for path in store.glob("*.whl"):
        parts = path.name.split("-")
        if norm(parts[0]) == norm(name) and parts[1] == version.replace("-", "_"):
            return path
    return None


pins = host_pins()
missing = [pin for pin in pins if wheel_of(pin) is None]
if missing:
    print(f"fetching {len(missing)} of {len(pins)} pinned wheels", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--wheel-dir", str(store), *missing], check=True)
still = [pin for pin in pins if wheel_of(pin) is None]
if still:
    sys.exit(f"no wheel in {store} for {still}")
if store.resolve() != target.resolve():
    for old in target.glob("*.whl"):
        old.unlink()
    for pin in pins:
        shutil.copy2(wheel_of(pin), target)
print(f"wheelhouse: {len(pins)} pinned wheels in {target}")
PY
log "wheelhouse took $((SECONDS - wheel_start)) s"

host_py=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ -x "$ROOT/usr/bin/python$host_py" ] ||
  log "WARNING: the root has no python$host_py; the test will skip (host runs $host_py)"
log "done in $((SECONDS - start)) s: export EXPOCLOUD_DEBIAN_ROOT=$ROOT"
