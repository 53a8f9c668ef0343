//! What the daemon reads of the host it runs on.

/// A field of `/proc/meminfo` (`MemTotal`, `MemAvailable`), in bytes; none where it cannot be
/// read.
pub fn meminfo(field: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hosts_memory_is_read() {
        let total = super::meminfo("MemTotal").expect("MemTotal");
        let available = super::meminfo("MemAvailable").expect("MemAvailable");
        assert!(total >= available && available > 0, "{total} {available}");
        assert_eq!(super::meminfo("Mem"), None);
    }
}
