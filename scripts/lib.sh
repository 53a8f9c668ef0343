# Shared helpers for scripts/up and scripts/test. Sourced, not run.

step() { printf '\n==> %s\n' "$*" >&2; }
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
        echo "starting dockerd (log: $log)" >&2
        nohup dockerd >"$log" 2>&1 &
        local waited=0
        until engine_answers; do
            sleep 1
            waited=$((waited + 1))
            if [ "$waited" -ge 60 ]; then
                tail -n 30 "$log" >&2 || true
                die "dockerd did not answer within 60 s"
            fi
        done
    fi
    echo "docker engine: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')" >&2
}
