//! Which addresses the web egress proxy may connect to (spec §13.3): only public unicast ones.
//! Loopback, private, link-local, CGNAT, multicast, unspecified, reserved and documentation
//! ranges and cloud metadata endpoints are refused in IPv4 and IPv6, including IPv4 addresses
//! embedded in IPv6 (mapped, compatible, NAT64, 6to4) and the numeric host spellings URL
//! parsers accept (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`). Also how a host list is
//! read: `tools.web_proxy.allow` entries ([`check_allowed`]) and `host:port` / `*.domain`
//! lists ([`listed`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::base::config::{ConfigError, LoadedConfig};

/// Why an address may not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Loopback,
    Private,
    LinkLocal,
    SharedAddressSpace,
    Multicast,
    Unspecified,
    Broadcast,
    Reserved,
    Documentation,
    CloudMetadata,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Loopback => "a loopback address",
            Refusal::Private => "a private address",
            Refusal::LinkLocal => "a link-local address",
            Refusal::SharedAddressSpace => "a carrier-grade NAT address (100.64.0.0/10)",
            Refusal::Multicast => "a multicast address",
            Refusal::Unspecified => "an unspecified address",
            Refusal::Broadcast => "the broadcast address",
            Refusal::Reserved => "a reserved address",
            Refusal::Documentation => "a documentation or benchmarking address",
            Refusal::CloudMetadata => "a cloud metadata endpoint",
        })
    }
}

impl Refusal {
    /// Whether no `tools.web_proxy.allow` entry can lift this refusal: link-local addresses
    /// and cloud metadata endpoints hold the host's cloud credentials, never a home service.
    pub fn is_absolute(self) -> bool {
        matches!(self, Refusal::LinkLocal | Refusal::CloudMetadata)
    }
}

/// Why a network (`base/prefix`, as an allowlist entry names it) may never be allowed: it
/// reaches a link-local address or a cloud metadata endpoint, directly or embedded in IPv6.
pub fn never_allowed(base: IpAddr, prefix: u8) -> Option<String> {
    let overlaps = |network: IpAddr, length: u8| {
        let shorter = prefix.min(length);
        match (base, network) {
            (IpAddr::V4(a), IpAddr::V4(b)) => in_v4(a, b.octets(), u32::from(shorter)),
            (IpAddr::V6(a), IpAddr::V6(b)) => in_v6(a, b, u32::from(shorter)),
            _ => false,
        }
    };
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    if overlaps(v4(169, 254, 0, 0), 16) {
        return Some("it reaches link-local addresses (169.254.0.0/16), where cloud metadata lives".into());
    }
    if let Some(endpoint) = METADATA_V4.iter().find(|endpoint| overlaps(IpAddr::V4(**endpoint), 32)) {
        return Some(format!("it reaches the cloud metadata endpoint {endpoint}"));
    }
    let v6 = |text: &str| text.parse::<Ipv6Addr>().map(IpAddr::V6).ok();
    if v6("fe80::").is_some_and(|network| overlaps(network, 10)) {
        return Some("it reaches link-local addresses (fe80::/10)".into());
    }
    if let Some(endpoint) = METADATA_V6.iter().find(|endpoint| overlaps(IpAddr::V6(**endpoint), 128)) {
        return Some(format!("it reaches the cloud metadata endpoint {endpoint}"));
    }
    // IPv6 forms that carry an IPv4 address (`shift` bits above the bottom) could carry one of
    // those: mapped, compatible, NAT64 and 6to4.
    let IpAddr::V6(base6) = base else { return None };
    let forbidden = std::iter::once((Ipv4Addr::new(169, 254, 0, 0), 16)).chain(METADATA_V4.iter().map(|e| (*e, 32)));
    for (network, length, shift) in
        [("::ffff:0:0", 96, 0), ("::", 96, 0), ("64:ff9b::", 96, 0), ("64:ff9b:1::", 48, 0), ("2002::", 16, 80)]
    {
        if !v6(network).is_some_and(|network| overlaps(network, length)) {
            continue;
        }
        let carried = Ipv4Addr::from((u128::from(base6) >> shift) as u32);
        // How many of the carried address's bits the entry fixes.
        let fixed = u32::from(prefix).saturating_sub(96 - shift).min(32);
        let mut hits = forbidden.clone().filter(|(net, len)| in_v4(carried, net.octets(), fixed.min(*len)));
        if let Some((net, _)) = hits.next() {
            return Some(format!(
                "it reaches IPv6 addresses that carry {net} ({network}/{length}); write IPv4 addresses as such"
            ));
        }
    }
    None
}

/// Cloud metadata endpoints, some of them inside ranges refused anyway, some public.
const METADATA_V4: &[Ipv4Addr] = &[
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OpenStack, DigitalOcean, …
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer (a public address)
];
const METADATA_V6: &[Ipv6Addr] = &[Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)]; // AWS IMDS over IPv6

/// Host names that are cloud metadata endpoints whatever they resolve to.
pub(crate) const METADATA_NAMES: &[&str] = &["metadata.google.internal", "metadata.goog", "metadata", "instance-data"];

fn in_v4(ip: Ipv4Addr, network: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(network)) & mask
}

fn in_v6(ip: Ipv6Addr, network: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
    u128::from(ip) & mask == u128::from(network) & mask
}

/// Why `ip` may not be reached, or `None` for a public unicast address.
pub fn refusal(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(ip) => refusal_v4(ip),
        IpAddr::V6(ip) => refusal_v6(ip),
    }
}

fn refusal_v4(ip: Ipv4Addr) -> Option<Refusal> {
    if METADATA_V4.contains(&ip) {
        return Some(Refusal::CloudMetadata);
    }
    let table: &[([u8; 4], u32, Refusal)] = &[
        ([0, 0, 0, 0], 8, Refusal::Unspecified),
        ([10, 0, 0, 0], 8, Refusal::Private),
        ([100, 64, 0, 0], 10, Refusal::SharedAddressSpace),
        ([127, 0, 0, 0], 8, Refusal::Loopback),
        ([169, 254, 0, 0], 16, Refusal::LinkLocal),
        ([172, 16, 0, 0], 12, Refusal::Private),
        ([192, 0, 0, 0], 24, Refusal::Reserved),
        ([192, 0, 2, 0], 24, Refusal::Documentation),
        ([192, 88, 99, 0], 24, Refusal::Reserved),
        ([192, 168, 0, 0], 16, Refusal::Private),
        ([198, 18, 0, 0], 15, Refusal::Documentation),
        ([198, 51, 100, 0], 24, Refusal::Documentation),
        ([203, 0, 113, 0], 24, Refusal::Documentation),
        ([224, 0, 0, 0], 4, Refusal::Multicast),
        ([255, 255, 255, 255], 32, Refusal::Broadcast),
        ([240, 0, 0, 0], 4, Refusal::Reserved),
    ];
    table.iter().find(|(network, prefix, _)| in_v4(ip, *network, *prefix)).map(|(_, _, why)| *why)
}

fn refusal_v6(ip: Ipv6Addr) -> Option<Refusal> {
    if METADATA_V6.contains(&ip) {
        return Some(Refusal::CloudMetadata);
    }
    if let Some(embedded) = embedded_v4(ip) {
        return refusal_v4(embedded);
    }
    let table: &[(Ipv6Addr, u32, Refusal)] = &[
        (Ipv6Addr::UNSPECIFIED, 128, Refusal::Unspecified),
        (Ipv6Addr::LOCALHOST, 128, Refusal::Loopback),
        (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64, Refusal::Reserved), // discard-only
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, Refusal::Reserved), // IETF protocol assignments, Teredo
        (Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 32, Refusal::Documentation),
        (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, Refusal::Documentation),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, Refusal::Private),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, Refusal::LinkLocal),
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, Refusal::Private), // site-local (deprecated)
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Refusal::Multicast),
    ];
    if let Some((_, _, why)) = table.iter().find(|(network, prefix, _)| in_v6(ip, *network, *prefix)) {
        return Some(*why);
    }
    // Only global unicast (2000::/3) is public.
    if !in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        return Some(Refusal::Reserved);
    }
    None
}

/// The IPv4 address inside an IPv6 one that carries it: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`) or 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let last = Ipv4Addr::new((segments[6] >> 8) as u8, segments[6] as u8, (segments[7] >> 8) as u8, segments[7] as u8);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some(mapped);
    }
    if segments[..6] == [0, 0, 0, 0, 0, 0] && ip != Ipv6Addr::UNSPECIFIED && ip != Ipv6Addr::LOCALHOST {
        return Some(last);
    }
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96)
        || in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48)
    {
        return Some(last);
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (segments[1] >> 8) as u8,
            segments[1] as u8,
            (segments[2] >> 8) as u8,
            segments[2] as u8,
        ));
    }
    None
}

/// A URL host written as an IP address, in any spelling a URL parser or `inet_aton` accepts:
/// bracketed IPv6, dotted quads with decimal, octal (`0177`) or hex (`0x7f`) parts, and the
/// short forms `a`, `a.b`, `a.b.c` (`127.1`, `2130706433`, `0x7f000001`). `None` for a name.
pub fn parse_ip_host(host: &str) -> Option<IpAddr> {
    let host = host.trim_end_matches('.');
    if let Some(inner) = host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        // A zone index (`%eth0`) never names a public address.
        let address = inner.split('%').next()?;
        return address.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Some(IpAddr::V6(v6));
    }
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(parse_number(part)?);
    }
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|n| *n > 255) {
        return None;
    }
    let bits_left = 8 * (4 - leading.len() as u32);
    if bits_left < 32 && *last >= 1u64 << bits_left {
        return None;
    }
    if *last > u64::from(u32::MAX) {
        return None;
    }
    let mut value: u64 = 0;
    for (index, n) in leading.iter().enumerate() {
        value |= n << (24 - 8 * index as u32);
    }
    value |= last;
    Some(IpAddr::V4(Ipv4Addr::from(value as u32)))
}

/// One part of a numeric IPv4 host: decimal, octal with a leading 0, or hex with 0x.
fn parse_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return (radix == 16).then_some(0);
    }
    if digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Whether a host name is a cloud metadata endpoint by name.
pub fn is_metadata_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    METADATA_NAMES.contains(&host.as_str())
}

/// One entry of `tools.web_proxy.allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Allowed {
    Host { name: String, port: Option<u16> },
    Network { base: IpAddr, prefix: u8, port: Option<u16> },
}

/// Why an entry of `tools.web_proxy.allow` is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    #[error("`{address}` is not an IP address")]
    NotAnAddress { address: String },
    #[error("`/{prefix}` is not a prefix length of 0 to {max}")]
    Prefix { prefix: String, max: u8 },
    #[error("`{entry}` is not host, host:port or a CIDR")]
    NotAnEntry { entry: String },
    /// It reaches a link-local address or a cloud metadata endpoint (`why`, in words).
    #[error("`{entry}` can never be allowed: {why}")]
    NeverAllowed { entry: String, why: String },
}

/// Checks one `tools.web_proxy.allow` entry: a host, host:port or CIDR, never one reaching a
/// link-local address or a cloud metadata endpoint.
pub fn check_allowed(entry: &str) -> Result<(), AllowError> {
    parse_allowed(entry).map(drop)
}

/// `tools.web_proxy.allow` in a loaded configuration: every entry parses, and none reaches
/// link-local or metadata. Whatever loads the configuration to use it (the daemon, `config
/// check`, setup) runs this next to `config::load`.
pub fn check_config(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    for (index, entry) in loaded.config.tools.web_proxy.allow.iter().enumerate() {
        if let Err(why) = check_allowed(entry) {
            return Err(loaded
                .invalid_setting(&["tools", "web_proxy", "allow"], format!("tools.web_proxy.allow[{index}]: {why}")));
        }
    }
    Ok(())
}

pub(crate) fn parse_allowed(entry: &str) -> Result<Allowed, AllowError> {
    let parsed = parse_allowed_entry(entry)?;
    let refused = match &parsed {
        Allowed::Network { base, prefix, .. } => never_allowed(*base, *prefix),
        Allowed::Host { name, .. } if is_metadata_name(name) => Some("it names a cloud metadata endpoint".into()),
        Allowed::Host { name, .. } => {
            parse_ip_host(name).and_then(|address| never_allowed(address, if address.is_ipv4() { 32 } else { 128 }))
        }
    };
    match refused {
        Some(why) => Err(AllowError::NeverAllowed { entry: entry.trim().to_string(), why }),
        None => Ok(parsed),
    }
}

fn parse_allowed_entry(entry: &str) -> Result<Allowed, AllowError> {
    let entry = entry.trim();
    let not_an_entry = || AllowError::NotAnEntry { entry: entry.to_string() };
    if let Some((address, prefix)) = entry.split_once('/') {
        let base: IpAddr =
            address.parse().map_err(|_not_ip| AllowError::NotAnAddress { address: address.to_string() })?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| AllowError::Prefix { prefix: prefix.to_string(), max })?;
        return Ok(Allowed::Network { base, prefix, port: None });
    }
    let (host, port) = split_host_port(entry).ok_or_else(not_an_entry)?;
    if let Ok(address) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        let prefix = if address.is_ipv4() { 32 } else { 128 };
        return Ok(Allowed::Network { base: address, prefix, port });
    }
    if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c)) {
        return Err(not_an_entry());
    }
    Ok(Allowed::Host { name: host.to_ascii_lowercase(), port })
}

/// Whether `host`:`port` is on `list`, whose entries are a host or `*.domain` (any name under
/// it), each maybe with `:port` (an MCP server's `egress`, a gateway's hosts).
pub(crate) fn listed<'a>(list: impl IntoIterator<Item = &'a str>, host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    list.into_iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let Some((name, wanted)) = split_host_port(&entry) else { return false };
        let name_matches = match name.strip_prefix("*.") {
            Some(domain) => host.strip_suffix(domain).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => host == name,
        };
        name_matches && wanted.is_none_or(|wanted| wanted == port)
    })
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; none when the port is not a port.
pub(crate) fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port.parse().ok()?))),
        Some(_) => Some((text, None)), // a bare IPv6 address
        None => Some((text, None)),
    }
}

pub(crate) fn in_network(address: IpAddr, base: IpAddr, prefix: u8) -> bool {
    match (address, base) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_entry_that_would_open_the_sandbox_is_refused_at_its_line() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "tools:\n  web_proxy:\n    allow: [\"nas.home\", \"169.254.169.254\"]\n",
                "tools.web_proxy.allow[1]: `169.254.169.254` can never be allowed: it reaches link-local",
                "3:5",
            ),
            ("tools:\n  web_proxy:\n    allow: [\"fd00:ec2::254\"]\n", "cloud metadata endpoint fd00:ec2::254", "3:5"),
            ("tools:\n  web_proxy:\n    allow: [metadata.google.internal]\n", "names a cloud metadata endpoint", "3:5"),
            ("tools:\n  web_proxy:\n    allow: [\"192.168.1.0/24\"]\n", "", ""),
        ];
        for (config, says, at) in cases {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("config.yaml"), config).expect("write");
            let paths = crate::base::config::ConfigPaths {
                config_file: None,
                config_dir: dir.path().to_path_buf(),
                data_dir: dir.path().join("data"),
            };
            let loaded = crate::base::config::load(&paths, std::iter::empty()).expect(config);
            match check_config(&loaded) {
                Ok(()) => assert!(says.is_empty(), "{config}: accepted"),
                Err(error) => {
                    let error = error.to_string();
                    assert!(error.contains(says) && error.contains(&format!("config.yaml:{at}:")), "{config}: {error}");
                }
            }
        }
    }

    fn ip(text: &str) -> IpAddr {
        parse_ip_host(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn link_local_and_metadata_networks_are_never_allowed() {
        let cases: &[(&str, u8, bool)] = &[
            ("169.254.169.254", 32, true),
            ("169.254.0.0", 16, true),
            ("169.0.0.0", 8, true),
            ("0.0.0.0", 0, true),
            ("168.63.129.16", 32, true),
            ("100.64.0.0", 10, true), // holds Alibaba's 100.100.100.200
            ("fe80::1", 128, true),
            ("fd00:ec2::254", 128, true),
            ("::ffff:169.254.169.254", 128, true),
            ("64:ff9b::a9fe:a9fe", 128, true),
            ("::", 0, true),
            ("2002:a9fe::", 32, true),
            ("::1", 128, false),
            ("::ffff:192.168.1.10", 128, false),
            ("192.168.1.10", 32, false),
            ("10.0.0.0", 8, false),
            ("172.16.0.0", 12, false),
            ("fd12:3456::", 48, false),
        ];
        for (base, prefix, refused) in cases {
            let why = never_allowed(base.parse().expect("ip"), *prefix);
            assert_eq!(why.is_some(), *refused, "{base}/{prefix}: {why:?}");
        }
    }

    #[test]
    fn every_spelling_of_loopback_is_loopback() {
        for spelling in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0x7f000001",
            "0x7F.1",
            "0177.0.0.1",
            "0177.1",
            "017700000001",
            "127.0.0.1.",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "[::127.0.0.1]",
            "[64:ff9b::127.0.0.1]",
            "[2002:7f00:1::]",
        ] {
            assert_eq!(refusal(ip(spelling)), Some(Refusal::Loopback), "{spelling}");
        }
    }

    #[test]
    fn private_special_and_metadata_ranges_are_refused() {
        for (host, why) in [
            ("10.0.0.1", Refusal::Private),
            ("172.16.5.4", Refusal::Private),
            ("172.31.255.255", Refusal::Private),
            ("192.168.1.1", Refusal::Private),
            ("100.64.0.1", Refusal::SharedAddressSpace),
            ("100.127.255.254", Refusal::SharedAddressSpace),
            ("169.254.169.254", Refusal::CloudMetadata),
            ("0xa9fea9fe", Refusal::CloudMetadata),
            ("[::ffff:169.254.169.254]", Refusal::CloudMetadata),
            ("[fd00:ec2::254]", Refusal::CloudMetadata),
            ("168.63.129.16", Refusal::CloudMetadata),
            ("169.254.1.1", Refusal::LinkLocal),
            ("0.0.0.0", Refusal::Unspecified),
            ("0", Refusal::Unspecified),
            ("[::]", Refusal::Unspecified),
            ("224.0.0.1", Refusal::Multicast),
            ("[ff02::1]", Refusal::Multicast),
            ("255.255.255.255", Refusal::Broadcast),
            ("240.0.0.1", Refusal::Reserved),
            ("192.0.2.7", Refusal::Documentation),
            ("198.18.0.1", Refusal::Documentation),
            ("[fe80::1]", Refusal::LinkLocal),
            ("[fe80::1%eth0]", Refusal::LinkLocal),
            ("[fd12:3456::1]", Refusal::Private),
            ("[2001:db8::1]", Refusal::Documentation),
            ("[::ffff:10.0.0.1]", Refusal::Private),
            ("[2002:a00:1::]", Refusal::Private),
        ] {
            assert_eq!(refusal(ip(host)), Some(why), "{host}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for host in ["93.184.216.34", "1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "[2606:4700::1111]"] {
            assert_eq!(refusal(ip(host)), None, "{host}");
        }
    }

    #[test]
    fn names_and_malformed_numbers_are_not_addresses() {
        for host in ["example.com", "localhost", "1.2.3.4.5", "256.1.1.1", "1.2.65536", "0x", "08.1.1.1", "1..1", ""] {
            let parsed = parse_ip_host(host);
            assert!(parsed.is_none() || host == "0x", "{host} parsed as {parsed:?}");
        }
        assert_eq!(
            parse_ip_host("0x"),
            Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "a bare 0x is zero, as inet_aton has it"
        );
        assert!(is_metadata_name("Metadata.Google.Internal."));
        assert!(!is_metadata_name("example.com"));
    }

    #[test]
    fn link_local_and_metadata_can_never_be_allowed() {
        for entry in [
            "169.254.169.254",
            "169.254.169.254:80",
            "169.254.0.0/16",
            "0.0.0.0/0",
            "[fe80::1]",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "metadata.google.internal",
            "168.63.129.16",
        ] {
            let error = check_allowed(entry).expect_err(entry);
            assert!(matches!(error, AllowError::NeverAllowed { .. }), "{entry}: {error}");
            assert!(error.to_string().contains("can never be allowed"), "{entry}: {error}");
        }
        for entry in ["192.168.1.10", "nas.home:8080", "10.0.0.0/8", "[fd12::1]:443"] {
            check_allowed(entry).unwrap_or_else(|error| panic!("{entry}: {error}"));
        }
    }

    #[test]
    fn allow_entries_parse_or_are_named() {
        assert_eq!(parse_allowed("searx.lan"), Ok(Allowed::Host { name: "searx.lan".into(), port: None }));
        assert_eq!(parse_allowed("Searx.lan:8080"), Ok(Allowed::Host { name: "searx.lan".into(), port: Some(8080) }));
        assert_eq!(
            parse_allowed("10.1.0.0/16"),
            Ok(Allowed::Network { base: "10.1.0.0".parse().expect("ip"), prefix: 16, port: None })
        );
        assert_eq!(
            parse_allowed("[::1]:9000"),
            Ok(Allowed::Network { base: "::1".parse().expect("ip"), prefix: 128, port: Some(9000) })
        );
    }
}
