#!/usr/bin/env python3
"""Runs the workspace's test binaries two at a time (`scripts/test` calls it).

`cargo test` runs one test binary after another, and most of ours spend their time waiting on
servers and containers, not on the two cores. This runs them in LANES at once, the longest
first, each the way `cargo test` runs it (in its package's folder, with cargo's variables), and
prints each binary's whole output when it ends, headed as cargo heads it. A binary that changes
what every other one shares (it restarts dockerd, makes runsc unusable, stops the Podman
service) runs alone. Every binary runs even when one fails; the failures are listed at the end
with the command that runs each again. Exit status: 0 when all passed.

Reads `cargo test --no-run --message-format=json` on stdin.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

LANES = 2

# Binaries that change what every other binary shares, or fill both cores for minutes: they run
# first, one by one, with nothing beside them.
ALONE = {
    "household",     # restarts dockerd: every container of the host goes down with it
    "gvisor_down",   # makes /usr/bin/runsc unusable for a while
    "setup",         # stops the Podman service; `scripts/up` may reconfigure dockerd
}
# Heavy: a browser, a homeserver, a layer build (AgentDojo's image), many sandboxes, 8 GB through
# the proxies under gVisor, the speech recogniser on both cores. Two never run side by side.
HEAVY = {
    "web_ui", "web", "web_approvals", "channels", "matrix", "mcp", "skills", "sandbox", "egress", "tunnel_bytes",
    "agentdojo", "browser", "browser_attacks", "web_push", "voice",
}
# Timed closely (200 ms health checks, 1-2 s deadlines): never beside a heavy one.
DELICATE = {"ops", "llm", "scheduler", "slack", "people", "engine_hang", "containers"}
# Pairs that share something by chance (mail ports picked from the pid).
APART = [{"email", "channels"}]

# Seconds each took in a CI run (2026-11-30): the longest start first, so the lanes end together.
TOOK = {
    "household": 179, "matrix": 125, "mcp": 90, "tunnel_bytes": 88, "channels": 80, "agentdojo": 70, "web": 40,
    "web_approvals": 30, "attack_acting": 20, "browser": 180, "browser_attacks": 190, "web_push": 60,
    "voice": 120,
    "sandbox": 53, "containment": 42, "scheduler": 41, "telegram": 37, "email": 34, "agents": 30,
    "egress": 28, "providers": 28, "baaaht_daemon": 24, "web_ui": 23, "people": 23, "ops": 18,
    "pools": 16, "slack": 16, "recall": 16, "tools": 13, "secrets": 13, "containers": 12,
    "skills": 11, "skill_attacks": 10, "llm": 10, "round_trips": 8, "setup": 5, "gvisor_down": 4,
}


def compatible(one, other):
    """Whether two binaries may run side by side."""
    if one == other:
        return True
    if one in HEAVY and (other in HEAVY or other in DELICATE) or other in HEAVY and one in DELICATE:
        return False
    return {one, other} not in APART


def binaries(lines, again):
    """The test executables cargo built, as (package, target, source, executable, env) jobs;
    `again` adds runs of one of them with more variables (PACKAGE:TARGET:NAME=VALUE)."""
    jobs = []
    for line in lines:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        package = message["package_id"]
        # "path+file:///work/main/daemon#baaaht-daemon@0.1.0" or "baaaht-daemon 0.1.0 (path+…)"
        name = package.split("#")[-1].split("@")[0] if "#" in package else package.split()[0]
        if "/" in name:
            name = name.rsplit("/", 1)[-1]
        folder = os.path.dirname(message["manifest_path"])
        source = os.path.relpath(target["src_path"], folder)
        kind = "unittests " if target["kind"] != ["test"] else ""
        jobs.append({
            "package": name, "target": target["name"].replace("-", "_"),
            "header": f"{kind}{source}", "executable": message["executable"], "folder": folder,
            "env": {}, "kind": target["kind"][0], "binary": target["name"],
        })
    for spec in again:
        package, target, assignment = spec.split(":", 2)
        key, value = assignment.split("=", 1)
        found = [job for job in jobs if job["package"] == package and job["target"] == target and not job["env"]]
        if not found:
            sys.exit(f"test-lanes: --again {spec}: cargo built no test binary {target} of {package}")
        job = dict(found[0], env={key: value})
        job["header"] += f" with {key}={value}"
        jobs.append(job)
    return jobs


def environment(job):
    env = dict(os.environ)
    env["CARGO_MANIFEST_DIR"] = job["folder"]
    env["CARGO_PKG_NAME"] = job["package"]
    env.update(job["env"])
    return env


class Lanes:
    def __init__(self, jobs):
        self.waiting = sorted(jobs, key=lambda job: (not self.alone(job), -TOOK.get(job["target"], 1)))
        self.running = {}
        self.failed = []
        self.lock = threading.Condition()
        self.stopping = False

    @staticmethod
    def alone(job):
        return job["target"] in ALONE

    def next_job(self):
        """The next job that may start beside those running, or None to wait."""
        running = list(self.running.values())
        if any(self.alone(job) for job in running):
            return None
        for index, job in enumerate(self.waiting):
            if self.alone(job):
                # It waits for the lanes to empty; nothing starts before it.
                return None if running else self.waiting.pop(index)
            if all(compatible(job["target"], other["target"]) for other in running):
                return self.waiting.pop(index)
        return None

    def run(self, job):
        started = time.monotonic()
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
            status = subprocess.call([job["executable"]], cwd=job["folder"], env=environment(job),
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.seek(0)
            output = log.read()
        took = time.monotonic() - started
        with self.lock:
            sys.stdout.write(f"     Running {job['header']} ({job['executable']}) [{took:.0f} s]\n{output}")
            if status != 0:
                sys.stdout.write(f"error: test failed: {job['header']} (exit status {status})\n")
                self.failed.append(job)
            sys.stdout.flush()

    def go(self):
        threads = []
        with self.lock:
            while self.waiting and not self.stopping:
                job = self.next_job() if len(self.running) < LANES else None
                if job is None:
                    self.lock.wait()
                    continue
                # Counted as running before its thread starts, so the next choice sees it.
                self.running[len(threads)] = job
                thread = threading.Thread(target=self.lane, args=(job, len(threads)))
                threads.append(thread)
                thread.start()
        for thread in threads:
            thread.join()

    def lane(self, job, slot):
        try:
            self.run(job)
        finally:
            with self.lock:
                del self.running[slot]
                self.lock.notify_all()


def main():
    again = [arg.split("=", 1)[1] for arg in sys.argv[1:] if arg.startswith("--again=")]
    jobs = binaries(sys.stdin, again)
    if not jobs:
        sys.exit("test-lanes: cargo built no test binary (was its JSON output given on stdin?)")
    lanes = Lanes(jobs)
    if "--list" in sys.argv[1:]:
        for job in lanes.waiting:
            alone = " (alone)" if lanes.alone(job) else ""
            print(f"{TOOK.get(job['target'], 1):>4} s  {job['package']} {job['header']}{alone}")
        return
    # Ctrl-C reaches the test binaries (same process group); no new one starts after it.
    def interrupted(*_):
        lanes.stopping = True
    signal.signal(signal.SIGINT, interrupted)
    lanes.go()
    if lanes.failed:
        sys.stdout.write("\nfailed test binaries (run one again with the command after it):\n")
        for job in lanes.failed:
            extra = " ".join(f"{key}={value}" for key, value in job["env"].items())
            only = {"test": f"--test {job['target']}", "bin": f"--bin {job['binary']}"}.get(job["kind"], "--lib")
            sys.stdout.write(f"  {job['header']}: {extra + ' ' if extra else ''}cargo test -p {job['package']} {only}\n")
        sys.exit(1)
    if lanes.stopping:
        sys.exit(130)


if __name__ == "__main__":
    main()
