//! Who may write to the assistant by mail: addresses (`alice@family.example`) and whole
//! domains (`@family.example`). Anyone else's mail is left unread and logged: a mailbox that
//! answered anyone would spend the household's budget on spam.

/// The senders the gateway answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    addresses: Vec<String>,
    domains: Vec<String>,
}

impl Allowed {
    /// From `--allow` values, each a comma-separated list.
    pub fn parse(values: &[String]) -> Result<Allowed, String> {
        let mut allowed = Allowed { addresses: vec![], domains: vec![] };
        for entry in values.iter().flat_map(|value| value.split(',')).map(str::trim).filter(|entry| !entry.is_empty()) {
            let entry = entry.to_ascii_lowercase();
            let domain = entry.strip_prefix("*@").or_else(|| entry.strip_prefix('@'));
            match domain {
                Some(domain) if valid_domain(domain) => allowed.domains.push(domain.to_string()),
                None if entry
                    .split_once('@')
                    .is_some_and(|(user, domain)| !user.is_empty() && valid_domain(domain)) =>
                {
                    allowed.addresses.push(entry)
                }
                _ => {
                    return Err(format!(
                        "--allow `{entry}`: give an address (alice@family.example) or a domain (@family.example)"
                    ))
                }
            }
        }
        if allowed.addresses.is_empty() && allowed.domains.is_empty() {
            return Err(
                "--allow: name who may write to the assistant (addresses or @domains); a mailbox that answered \
                        anyone would answer spam"
                    .into(),
            );
        }
        Ok(allowed)
    }

    /// Whether mail from `address` (lowercase) is answered.
    pub fn allows(&self, address: &str) -> bool {
        let domain = address.rsplit_once('@').map(|(_, domain)| domain).unwrap_or_default();
        self.addresses.iter().any(|allowed| allowed == address) || self.domains.iter().any(|allowed| allowed == domain)
    }
}

fn valid_domain(domain: &str) -> bool {
    !domain.is_empty()
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && domain.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_domains_are_allowed_and_nothing_else() {
        let allowed =
            Allowed::parse(&["Alice@Family.test, @kids.test".into(), "*@grandma.test".into()]).expect("parse");
        assert!(allowed.allows("alice@family.test"));
        assert!(allowed.allows("tim@kids.test") && allowed.allows("ma@grandma.test"));
        assert!(
            !allowed.allows("bob@family.test") && !allowed.allows("x@evilkids.test") && !allowed.allows("kids.test")
        );
        assert!(Allowed::parse(&[]).expect_err("none").contains("spam"));
        for bad in ["alice", "@", "alice@", "@bad domain", "a@.x"] {
            assert!(Allowed::parse(&[bad.into()]).expect_err(bad).starts_with("--allow `"), "{bad}");
        }
    }
}
