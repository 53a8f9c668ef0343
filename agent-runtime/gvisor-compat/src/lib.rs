//! Preloaded (`LD_PRELOAD`) into containers that run under gVisor, and only there.
//!
//! Debian 12's runsc (2022) answers `statx` with EINVAL when its flags hold
//! `AT_NO_AUTOMOUNT`, which coreutils 9 always passes: `ls -l`, `stat`, `cp -a` and `du`
//! then fail on every file ("cannot access 'x': Invalid argument"). No runsc flag changes it
//! and seccomp cannot rewrite an argument, so this library's `statx` drops that one flag and
//! calls the kernel. It changes nothing else: a container has no automount points, where the
//! flag would mean something. Newer gVisor accepts the flag; this library is then a no-op.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// Don't trigger an automount of the last component (linux/fcntl.h).
const AT_NO_AUTOMOUNT: c_int = 0x800;

/// glibc's `statx(3)`, with `AT_NO_AUTOMOUNT` left out of `flags`.
///
/// # Safety
/// The caller's contract is statx(2)'s: `path` a NUL-terminated string, `buf` room for a
/// `struct statx`. Both go to the kernel unread here, which checks them.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut c_void,
) -> c_int {
    // SAFETY: the arguments are the caller's, passed on as the raw system call takes them.
    let result = unsafe { libc::syscall(libc::SYS_statx, dirfd, path, flags & !AT_NO_AUTOMOUNT, mask, buf) };
    result as c_int
}
