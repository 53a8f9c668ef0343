# Shared helpers for scripts/up and scripts/test. Sourced, not run.

# Each step says how long the run has taken so far, so a slow run shows where its time went.
step() { printf '\n==> %s (at %ss)\n' "$*" "$SECONDS" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing: $2"; }

is_root() { [ "$(id -u)" = 0 ]; }
is_debian() { [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; }

apt_updated=
apt_install() {
    is_root && is_debian || die "cannot install $* here: run as root on Debian, or install it yourself"
    if [ -z "$apt_updated" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Waits up to SECONDS for COMMAND... to succeed; otherwise shows the tail of LOG (when it is a
# file) and dies saying WHAT did not happen.
wait_until() {
    local seconds=$1 log=$2 what=$3
    shift 3
    local waited=0
    until "$@"; do
        sleep 1
        waited=$((waited + 1))
        if [ "$waited" -ge "$seconds" ]; then
            [ -f "$log" ] && tail -n 30 "$log" >&2
            die "$what within $seconds s"
        fi
    done
}

# Starts COMMAND... in the background as a service of this machine, not of the script: in a
# session of its own (setsid), so the Ctrl-C that stops a script (a signal to the terminal's
# foreground process group) never reaches it, and it outlives the script. Its output goes to
# LOG. Where systemd runs, prefer its unit (start_unit).
start_service() {
    local log=$1
    shift
    setsid --fork nohup "$@" >"$log" 2>&1 </dev/null
}

# Starts systemd's UNIT when systemd runs this machine and has the unit; false otherwise.
start_unit() {
    [ -d /run/systemd/system ] && systemctl cat "$1" >/dev/null 2>&1 && systemctl start "$1"
}

# The speech service builds whisper.cpp and libopus from their sources, with cmake and a C++
# compiler.
ensure_build_tools() {
    if ! command -v cmake >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
        is_root && is_debian || die "cmake and a C++ compiler are missing: install cmake and g++ (the speech service builds whisper.cpp)"
        apt_install cmake g++ make
    fi
}

engine_answers() {
    [ -S /var/run/docker.sock ] && timeout 10 docker version >/dev/null 2>&1
}

# Makes sure a Docker Engine answers on /var/run/docker.sock: installs Debian's docker.io
# and starts dockerd when none does. Waits up to 60 s for it.
ensure_container_engine() {
    if engine_answers; then
        echo "docker engine: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')" >&2
        return
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        echo "installing Debian's docker.io (dockerd) and debootstrap" >&2
        apt_install docker.io debootstrap
    fi
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    if ! engine_answers; then
        is_root || die "no container engine answers on /var/run/docker.sock and dockerd needs root to start"
        local log=/var/log/baaaht-dockerd.log
        if start_unit docker.service; then
            echo "started docker.service (systemd)" >&2
        else
            echo "starting dockerd in its own session; it outlives this script (log: $log)" >&2
            start_service "$log" dockerd
        fi
        wait_until 60 "$log" "dockerd did not answer" engine_answers
    fi
    echo "docker engine: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')" >&2
}

# The runsc runtime arguments baaaht needs (README "Isolation tiers"): ptrace works on any
# host (KVM needs /dev/kvm); Debian's runsc (2022) refuses a network in the root namespace;
# containers connect to their daemon socket (a host Unix socket); our seccomp profile applies
# inside the sandbox.
GVISOR_RUNTIME_ARGS='["--platform=ptrace", "--network=none", "--host-uds=open", "--oci-seccomp"]'

# Makes sure dockerd has a `runsc` runtime baaaht can use: installs Debian's runsc when it is
# missing and merges the runtime into /etc/docker/daemon.json (keeping everything else there),
# then reloads dockerd with SIGHUP, never restarting it. Idempotent.
gvisor_registered() {
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'
}

ensure_gvisor() {
    command -v runsc >/dev/null 2>&1 || apt_install runsc
    local runsc
    runsc=$(command -v runsc)
    if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc":{"path":"'"$runsc"'","runtimeArgs":\["--platform=ptrace","--network=none","--host-uds=open","--oci-seccomp"\]}'; then
        echo "gVisor: runsc registered with dockerd" >&2
        return
    fi
    is_root || die "registering runsc with dockerd needs root: add it to /etc/docker/daemon.json (README \"Isolation tiers\")"
    mkdir -p /etc/docker
    python3 - "$runsc" "$GVISOR_RUNTIME_ARGS" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
config = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        config = json.load(f)
config.setdefault("runtimes", {})["runsc"] = {"path": sys.argv[1], "runtimeArgs": json.loads(sys.argv[2])}
tmp = path + ".baaaht-tmp"
with open(tmp, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, path)
PY
    local pid
    pid=$(pgrep -xo dockerd) || die "dockerd is not running: cannot reload it to register runsc"
    kill -HUP "$pid"
    wait_until 20 "" "dockerd did not pick up the runsc runtime from /etc/docker/daemon.json" gvisor_registered
    echo "gVisor: runsc registered with dockerd (reloaded with SIGHUP)" >&2
}

# Makes sure Podman's Docker-compatible API answers on /run/podman/podman.sock (as root):
# installs Debian's podman and starts its service when none answers.
PODMAN_SOCKET=/run/podman/podman.sock
podman_answers() {
    [ -S "$PODMAN_SOCKET" ] && timeout 10 curl -sf --unix-socket "$PODMAN_SOCKET" http://d/_ping >/dev/null 2>&1
}

ensure_podman() {
    command -v podman >/dev/null 2>&1 || apt_install podman
    if podman_answers; then
        return
    fi
    is_root || die "starting the Podman service needs root here"
    mkdir -p "$(dirname "$PODMAN_SOCKET")"
    local log=/var/log/baaaht-podman.log
    # From /: conmon, which the service starts per container, writes files (e.g. `oom`) into
    # its working folder.
    (cd / && start_service "$log" podman system service --time=0 "unix://$PODMAN_SOCKET")
    wait_until 30 "$log" "the Podman service did not answer" podman_answers
    echo "podman: $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version)" >&2
}
