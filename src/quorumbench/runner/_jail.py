"""The ``unshare`` fallback: the worker builds its own sandbox root, then drops root.

``unshare`` gives the worker new user, mount, PID, network, IPC and UTS namespaces
and makes it root of the new user namespace; nothing else. Before it imports
anything beyond the standard library, the worker (:func:`enter`):

1. makes every mount private to its namespace;
2. opens every path the layout shows, then mounts a tmpfs over ``/tmp`` as the new
   root and bind-mounts those paths into it (read-only, recursively), so a path
   under the host's ``/tmp`` stays reachable through its open descriptor;
3. adds a fresh ``/proc`` (its own PID namespace; ``/proc/sys`` read-only), a
   minimal ``/dev`` (null, zero, full, random, urandom, tty) and a size-limited
   ``/tmp``; makes the root read-only and ``chroot``\\ s into it (a chrooted process
   may not create user namespaces, so it cannot undo this);
4. sets ``no_new_privs`` and empties its capability bounding set, so the ``exec``
   that follows (:func:`quorumbench.runner.sandbox_worker.main`) has no capability.

Only the standard library and ``ctypes`` are used; x86-64 and arm64 Linux.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (Linux >= 5.12)
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1
ROOT = "/tmp"
"""Where the new root is mounted (in the worker's own mount namespace only)."""
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_ST_TO_MS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc.mount(
        _bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data or None)
    )
    if result != 0:
        raise _fail(f"mount {target}")


def _read_only(target: str) -> None:
    """Make ``target`` and every mount below it read-only."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    done = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        _bytes(target),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if done == 0:
        return
    # An older kernel: the top mount only, keeping the flags a user namespace may not drop.
    kept = os.statvfs(target).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    flags |= sum(ms for st, ms in _ST_TO_MS if kept & st)
    _mount(None, target, None, flags)


def _bind(fd: int, target: str, *, read_only: bool) -> None:
    source = f"/proc/self/fd/{fd}"
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _read_only(target)


def enter(jail: dict[str, Any]) -> None:
    """Build the root that ``jail`` (a :meth:`Layout.to_json`) describes and enter it."""
    readable = [str(p) for p in jail["readable"]]
    writable = [str(p) for p in jail["writable"]]
    devices = [str(p) for p in jail["devices"]] + [f"/dev/{name}" for name in DEVICES]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    fds = {
        path: os.open(path, os.O_PATH | os.O_CLOEXEC)
        for path in readable + writable + devices
        if os.path.exists(path)
    }
    _mount("quorumbench-root", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    os.makedirs(ROOT + "/tmp")  # first: the binds below may lie under /tmp
    tmp_options = f"mode=1777,size={int(jail['tmp_bytes'])}"
    _mount("quorumbench-tmp", ROOT + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_options)
    for target, link in jail["symlinks"]:
        os.symlink(target, ROOT + link)
    for path in readable:
        if path in fds:
            _bind(fds[path], ROOT + path, read_only=True)
    for path in writable:
        _bind(fds[path], ROOT + path, read_only=False)
    os.makedirs(ROOT + "/proc")
    _mount("proc", ROOT + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in ("sys", "sysrq-trigger", "irq", "bus"):
        path = f"{ROOT}/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _read_only(path)
    os.makedirs(ROOT + "/dev")
    _mount("quorumbench-dev", ROOT + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    for path in devices:
        if path in fds:
            _bind(fds[path], ROOT + path, read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(target, f"{ROOT}/dev/{name}")
    os.symlink("/proc/self/fd/1", f"{ROOT}/dev/stdout")
    os.symlink("/proc/self/fd/2", f"{ROOT}/dev/stderr")
    for fd in fds.values():
        os.close(fd)
    _mount(None, ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(ROOT)
    os.chroot(".")
    os.chdir("/tmp")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("no_new_privs")
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the last capability this kernel has
                break
            raise _fail(f"dropping capability {cap}")
