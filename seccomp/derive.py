#!/usr/bin/env python3
"""Derives seccomp/default.json from the container engines' default profile.

Input: containers-common's /usr/share/containers/seccomp.json (Debian package
golang-github-containers-common, `apt-get download` + `dpkg -x` works without installing it).
Output (stdout): the same allowlist without the system calls baaaht containers never need
(DESIGN.md §5.4, issue 3), and `socket` allowed only for stream, datagram and seqpacket
sockets outside AF_PACKET, so raw and packet sockets are refused.

    python3 seccomp/derive.py /usr/share/containers/seccomp.json > seccomp/default.json
"""
import json
import sys

REMOVED = {
    # debugging other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "process_madvise",
    # mounts and namespaces
    "mount", "umount", "umount2", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "pivot_root", "chroot", "unshare", "setns",
    # kernel keyring
    "keyctl", "add_key", "request_key",
    # kernel programs and tracing
    "bpf", "perf_event_open", "userfaultfd",
    # kernel replacement and modules
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "query_module",
    # re-added below with conditions; socketcall (the 32-bit multiplexer) would bypass them
    "socket", "socketcall", "clone", "clone3",
}

# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NAMESPACE_FLAGS = 0x7E020000
ENOSYS = 38

AF_PACKET = 17
NETLINK_AUDIT = 9
SOCK_TYPE_MASK = 0xF
ALLOWED_SOCKET_TYPES = {1: "SOCK_STREAM", 2: "SOCK_DGRAM", 5: "SOCK_SEQPACKET"}


def main(path):
    profile = json.load(open(path))
    kept = []
    for rule in profile["syscalls"]:
        names = [name for name in rule["names"] if name not in REMOVED]
        if not names:
            continue
        # Rules that only apply with capabilities never match: every container drops them all.
        if rule.get("includes", {}).get("caps"):
            continue
        rule = dict(rule, names=names)
        kept.append(rule)
    kept.append({
        "names": ["clone"],
        "action": "SCMP_ACT_ALLOW",
        "comment": "threads and processes, never new namespaces",
        "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
    })
    kept.append({
        "names": ["clone3"],
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": ENOSYS,
        "comment": "its flags live in memory seccomp cannot inspect; ENOSYS makes libc fall back to clone",
    })
    for socket_type, name in ALLOWED_SOCKET_TYPES.items():
        kept.append({
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "comment": f"{name} outside AF_PACKET and NETLINK_AUDIT; raw and packet sockets are refused",
            "args": [
                {"index": 0, "value": AF_PACKET, "valueTwo": 0, "op": "SCMP_CMP_NE"},
                {"index": 1, "value": SOCK_TYPE_MASK, "valueTwo": socket_type, "op": "SCMP_CMP_MASKED_EQ"},
                {"index": 2, "value": NETLINK_AUDIT, "valueTwo": 0, "op": "SCMP_CMP_NE"},
            ],
        })
    profile["syscalls"] = kept
    json.dump(profile, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/containers/seccomp.json")
