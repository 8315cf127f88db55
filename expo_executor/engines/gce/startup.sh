#!/bin/bash
# The body of expocloud's worker startup script, a template: render() in startup.py (next to
# this file) writes the script as its own header (the shebang, set -euo pipefail), the rendered
# configuration (readonly MODE, PYTHON_VERSION, PINS, WHEEL_*, REQUIREMENTS, BOOT_LOG_*,
# WORKER_UNIT, ...), then everything below the marker line, with each __NAME__ (VENV, SCRATCH,
# HOME_DIR, LOG, LOCK, SYSTEMD_DIR) replaced by its shell-quoted path. This header is left out.
# Checked by shellcheck as it stands here (tests/e2e/test_startup_script_run.py).
# -- body --

readonly VENV=__VENV__ SYSTEMD_DIR=__SYSTEMD_DIR__
readonly HOME_DIR=__HOME_DIR__ SCRATCH=__SCRATCH__ USER_NAME=expocloud
readonly LOG=__LOG__ LOCK=__LOCK__
readonly METADATA="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1"
readonly DOWNLOADS="${VENV%/*}/downloads"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
HALT=poweroff
HALT_ON_EXIT=1
TEE_PID=
WORKER_STARTED=0

log() { printf '%s expocloud-startup: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

# Whatever happens, the VM halts when this script ends: a VM whose setup failed must not bill.
finish() {
  local status=$?
  set +e
  log "exit status $status"
  if [ -n "$TEE_PID" ]; then  # let the log catch up before the VM goes down
    exec 1>&3 2>&3 3>&-
    wait "$TEE_PID"
  fi
  if [ "$status" != 0 ] && [ "$WORKER_STARTED" = 0 ] && [ "$HALT_ON_EXIT" = 1 ]; then
    upload_boot_log 2>&1 | tee -a "$LOG"
  fi
  if [ "$HALT_ON_EXIT" = 1 ] && [ -n "$HALT" ]; then
    local -a halt_argv
    read -r -a halt_argv <<<"$HALT"
    log "halting: $HALT" | tee -a "$LOG"
    sync
    "${halt_argv[@]}"
  fi
  exit "$status"
}

metadata() {  # metadata PATH [CURL-OPTION...]: later options override the retries
  local path=$1
  shift
  curl -fsS --retry 10 --retry-connrefused --retry-delay 1 --connect-timeout 5 "$@" \
    -H 'Metadata-Flavor: Google' "$METADATA/$path"
}

# The service account's access token, parsed without python3 (which a failed setup may lack).
# It only ever travels through pipes and variables: never argv, never the log.
access_token() {  # access_token [CURL-OPTION...]
  local token
  token=$(metadata instance/service-accounts/default/token "$@" |
    sed -n 's/.*"access_token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p') || return 1
  [ -n "$token" ] || return 1
  printf '%s' "$token"
}

# A VM whose setup failed leaves the end of this log in the run's bucket before it halts, so
# that the coordinator can say why its VMs never come up. Best effort and bounded in time
# (about a minute at worst): whatever fails here is logged, and the VM halts anyway.
upload_boot_log() {
  [ -n "$BOOT_LOG_BUCKET" ] || return 0
  local vm token lines url
  if ! vm=$(metadata instance/name --retry 2 --max-time 5) || ! [[ $vm =~ ^[a-z0-9-]+$ ]]; then
    log "boot log not uploaded: no instance name from the metadata server"
    return 0
  fi
  token=$(access_token --retry 2 --max-time 5) ||
    { log "boot log not uploaded: no access token from the metadata server"; return 0; }
  lines=$(mktemp) || return 0
  tail -n "$BOOT_LOG_LINES" "$LOG" >"$lines"
  url="$STORAGE_HOST/upload/storage/v1/b/$BOOT_LOG_BUCKET/o?uploadType=media&name="
  url+="$BOOT_LOG_PREFIX$vm$BOOT_LOG_SUFFIX"
  if printf 'Authorization: Bearer %s\n' "$token" |
    curl -fsS --connect-timeout 5 --max-time 20 --retry 2 --retry-max-time 20 -H @- \
      -H 'Content-Type: text/plain; charset=utf-8' --data-binary "@$lines" -o /dev/null "$url"
  then
    log "left the last $BOOT_LOG_LINES log lines in the run's bucket: $url"
  else
    log "could not upload the boot log to $url (above); halting anyway"
  fi
  rm -f "$lines"
}

attribute() {  # attribute NAME DEFAULT: an instance metadata attribute, or DEFAULT if absent
  local value
  if value=$(metadata "instance/attributes/$1" 2>/dev/null); then
    printf '%s' "$value"
  else
    printf '%s' "$2"
  fi
}

apt_install() {
  command -v apt-get >/dev/null || die "$* missing and no apt-get: use an image that has them"
  log "apt-get install $*"
  if ! apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "$@"; then
    apt-get -o DPkg::Lock::Timeout=300 update
    apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "$@"
  fi
}

python_minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

# The wanted installation, as one line: it is stored in the venv once the install completed.
stamp() {
  printf '%s\n' "$PYTHON_VERSION" "$WHEEL_SHA256" "${PINS[@]}" \
    "$REQUIREMENTS_SHA256" "${REQUIREMENTS[@]}" | sha256sum | cut -d' ' -f1
}

check_versions() {  # check_versions PYTHON: every pin, yours and this package at the pinned version
  "$1" - "$PACKAGE==$PACKAGE_VERSION" "${PINS[@]}" "${REQUIREMENTS[@]}" <<'PY'
import importlib.metadata, sys
try:  # 1.0 and 1.0.0 are one version (PEP 440); the worker's pins hold packaging
    from packaging.version import Version as same
except ImportError:
    same = str
bad = []
for pin in sys.argv[1:]:
    name, _, want = pin.partition("==")
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        have = "missing"
    try:
        equal = same(have) == same(want)
    except ValueError:
        equal = have == want
    if not equal:
        bad.append(f"{name}: want {want}, have {have}")
if bad:
    print("version mismatch: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
}

ensure_python() {
  command -v python3 >/dev/null || apt_install python3 python3-venv
  local have
  have=$(python_minor python3)
  [ "$have" = "$PYTHON_VERSION" ] || die "this VM has Python $have but the submitting host" \
    "runs $PYTHON_VERSION: use an image whose python3 is $PYTHON_VERSION, or image mode"
  # Debian splits ensurepip out of python3 into python3-venv; GCE's debian-12 lacks it.
  python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
}

fetch_staged() {  # fetch_staged DEST OBJECT SHA256 WHAT: a staged file from GCS, checked
  local token url
  token=$(access_token) || die "no access token from the metadata server"
  url="$STORAGE_HOST/storage/v1/b/$WHEEL_BUCKET/o/$2?alt=media"
  log "downloading $url"
  # The token goes through stdin, not argv, so other processes cannot read it.
  printf 'Authorization: Bearer %s\n' "$token" |
    curl -fsS --retry 10 --retry-connrefused --retry-delay 2 --connect-timeout 10 \
      -H @- -o "$1.part" "$url" || die "could not download the $4 from $url"
  local have
  have=$(sha256sum "$1.part" | cut -d' ' -f1)
  if [ "$have" != "$3" ]; then
    rm -f "$1.part"
    die "$4 checksum mismatch: want $3, got $have"
  fi
  mv "$1.part" "$1"
}

fetched() {  # fetched DEST OBJECT SHA256 WHAT: DEST holds the staged file (downloaded if not)
  if ! [ -f "$1" ] || [ "$(sha256sum "$1" | cut -d' ' -f1)" != "$3" ]; then
    fetch_staged "$@"
  fi
}

# Your packages (--expocloud-worker-requirements): after the worker's, with --no-deps from
# exact pins too, from the same source; --require-hashes when the file gives hashes.
install_requirements() {  # install_requirements SOURCE-ARGS...
  [ -n "$REQUIREMENTS_OBJECT" ] || return 0
  local file="$DOWNLOADS/requirements-${REQUIREMENTS_SHA256:0:16}.txt"
  fetched "$file" "$REQUIREMENTS_OBJECT" "$REQUIREMENTS_SHA256" "requirements file"
  local -a hashes=()
  [ "$REQUIREMENTS_HASHED" = 1 ] && hashes=(--require-hashes)
  log "installing ${#REQUIREMENTS[@]} pinned distributions of yours (worker requirements)"
  "$VENV/bin/python" -m pip install --no-cache-dir --no-deps "${hashes[@]}" "$@" -r "$file" ||
    die "could not install your worker requirements (above)"
}

install_venv() {
  if [ -f "$VENV/.expocloud-stamp" ] && [ "$(cat "$VENV/.expocloud-stamp")" = "$(stamp)" ] &&
    check_versions "$VENV/bin/python"; then
    log "pinned software already installed in $VENV"
    return
  fi
  mkdir -p "$DOWNLOADS"
  local wheel="$DOWNLOADS/$WHEEL_FILE"
  fetched "$wheel" "$WHEEL_OBJECT" "$WHEEL_SHA256" wheel
  log "installing ${#PINS[@]} pinned distributions and $WHEEL_FILE into $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  local -a source=()
  if [ -n "$FIND_LINKS" ]; then
    source=(--no-index --find-links "$FIND_LINKS")
  elif [ -n "$INDEX_URL" ]; then
    source=(--index-url "$INDEX_URL")
  fi
  # --no-deps: exactly the host's closure and no resolver. A pin published only as an sdist
  # (connection-pool) is built by pip in an isolated, throw-away build environment.
  "$VENV/bin/python" -m pip install --no-cache-dir --no-deps "${source[@]}" "${PINS[@]}" \
    "$wheel"
  install_requirements "${source[@]}"
  check_versions "$VENV/bin/python" || die "the venv does not hold the pinned versions"
  "$VENV/bin/python" -m pip check || log "warning: pip check reports inconsistencies (above)"
  stamp >"$VENV/.expocloud-stamp"
  log "installed"
}

check_image() {
  [ -x "$VENV/bin/python" ] || die "image mode: the image has no venv at $VENV"
  local have
  have=$(python_minor "$VENV/bin/python")
  [ "$have" = "$PYTHON_VERSION" ] || die "image mode: $VENV has Python $have, the host" \
    "runs $PYTHON_VERSION"
  check_versions "$VENV/bin/python" || die "image mode: the image's $VENV differs from the host"
  log "image software matches the host"
}

ensure_user() {
  id -u "$USER_NAME" >/dev/null 2>&1 ||
    useradd --system --user-group --home-dir "$HOME_DIR" --shell /usr/sbin/nologin "$USER_NAME"
  install -d -o "$USER_NAME" -g "$USER_NAME" -m 0750 "$HOME_DIR" "$SCRATCH"
}

# Under systemd (a real VM) the worker runs in a service of its own, not as this script's
# child: Google's guest agent runs startup scripts in a oneshot service with KillMode=process,
# so at a shutdown (a Spot preemption) systemd stops the script runner first, the worker's
# output pipe (tee) dies and its last report races the network going down. The worker's unit
# is ordered after network-online.target (so it is stopped before the network), its SIGTERM
# goes to the worker alone (KillMode=mixed: it ends its jobs itself and says how), with
# TimeoutStopSec to report; systemd appends its output to the log, and systemd-run --wait
# returns its exit status.
run_worker_unit() {  # run_worker_unit NAME=VALUE... -- ARGV...
  local -a args=(--unit="$WORKER_UNIT" --description="expocloud worker" --service-type=exec
    --collect --wait --uid="$USER_NAME" --gid="$USER_NAME" --working-directory=/)
  local property
  for property in "${WORKER_UNIT_PROPERTIES[@]}"; do
    args+=(--property="$property")
  done
  while [ "$1" != -- ]; do
    args+=(--setenv="$1")
    shift
  done
  shift
  systemd-run "${args[@]}" -- "$@"
}

run_worker() {
  [ -x "$VENV/bin/expocloud-worker" ] || die "$VENV/bin/expocloud-worker is missing"
  WORKER_STARTED=1
  cd /
  local status=0
  # A clean environment: nothing of the script runner's leaks into the worker and its jobs.
  local -a env=(PATH="$VENV/bin:/usr/local/bin:/usr/bin:/bin" HOME="$HOME_DIR" LANG=C.UTF-8
    ${GCE_METADATA_HOST:+"GCE_METADATA_HOST=$GCE_METADATA_HOST"})
  local -a worker=("$VENV/bin/expocloud-worker" --from-metadata --scratch "$SCRATCH")
  if [ -d "$SYSTEMD_DIR" ]; then
    log "starting expocloud-worker as $USER_NAME in the systemd unit $WORKER_UNIT.service"
    run_worker_unit "${env[@]}" -- "${worker[@]}" 3>&- 9>&- || status=$?
  else  # no systemd (a container, a chroot): the worker is this script's child
    log "starting expocloud-worker as $USER_NAME"
    runuser -u "$USER_NAME" -- env -i "${env[@]}" "${worker[@]}" 3>&- 9>&- || status=$?
  fi
  log "expocloud-worker exited with status $status"
  return "$status"
}

main() {
  [ "$(id -u)" = 0 ] || { HALT_ON_EXIT=0; die "run me as root"; }
  mkdir -p "$(dirname "$LOG")"
  exec 3>&1 > >(tee -a "$LOG") 2>&1
  TEE_PID=$!
  mkdir -p "${LOCK%/*}"
  exec 9>"$LOCK"
  # A second copy (someone re-running the script by hand) must not halt the VM under us.
  flock -n 9 || { HALT_ON_EXIT=0; die "another expocloud startup script is running"; }
  HALT=$(attribute expocloud-halt poweroff)
  log "mode $MODE, Python $PYTHON_VERSION, $PACKAGE $PACKAGE_VERSION, ${#PINS[@]} pins," \
    "${#REQUIREMENTS[@]} worker requirements"
  case "$MODE" in
    pip) ensure_python; install_venv ;;
    image) check_image ;;
  esac
  ensure_user
  run_worker
}

trap finish EXIT
main "$@"
