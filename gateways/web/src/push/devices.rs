//! Each person's devices that allowed notifications, and what they chose to be told: one JSON
//! file in the gateway's state folder (`push.json`), written atomically. A device is its
//! browser's push subscription (the push service's address and the keys to encrypt for it)
//! and the sign-in it was allowed in ([`crate::store::key`]): signing out there removes it, so
//! a shared tablet stops showing the last person's notifications.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::message::{origin, Keys};
// The push services browsers subscribe with, on 443. A device naming another address is
// refused (its address is where the gateway would connect), unless the site's operator named
// that service (`--push-service`).
use baaaht_proto::PUSH_SERVICES as SERVICES;

/// The file, in the gateway's state folder.
pub const FILE: &str = "push.json";
/// The most devices one person keeps (the oldest goes when another is added).
pub const MOST_DEVICES: usize = 10;
/// The longest push address taken (the services' are about 200 characters).
const MOST_ENDPOINT: usize = 1024;

/// How much of a message a notification shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// All of it (as much as fits).
    Full,
    /// Its first line.
    #[default]
    FirstLine,
    /// Only that there is one.
    Nothing,
}

/// What a person is told of, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kinds {
    /// Approvals asked (connections, acting tools, skills), with their answers.
    pub approvals: bool,
    /// Scheduled tasks' results, failures and pauses.
    pub results: bool,
    /// Heartbeats' findings.
    pub heartbeats: bool,
    /// An answer that finished while no page of theirs was open.
    pub answers: bool,
    /// A budget nearing its limit.
    pub budget: bool,
}

impl Default for Kinds {
    fn default() -> Kinds {
        Kinds { approvals: true, results: true, heartbeats: true, answers: true, budget: true }
    }
}

/// Hours in which nothing wakes the person: only approvals come, silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quiet {
    /// `HH:MM`, the start (inclusive).
    pub from: String,
    /// `HH:MM`, the end (exclusive); before `from`, the hours span midnight.
    pub to: String,
    /// The IANA time zone the hours are in (`Europe/Berlin`).
    pub timezone: String,
}

impl Quiet {
    /// The hours checked: a sentence saying which part is wrong, and how to write it.
    pub fn check(&self) -> Result<(), String> {
        minutes(&self.from)
            .ok_or_else(|| format!("quiet hours from `{}`: write a time as HH:MM, e.g. 22:00", self.from))?;
        minutes(&self.to).ok_or_else(|| format!("quiet hours to `{}`: write a time as HH:MM, e.g. 07:00", self.to))?;
        if self.from == self.to {
            return Err("quiet hours: the start and the end are the same time; leave them off instead".into());
        }
        jiff::tz::TimeZone::get(&self.timezone).map_err(|_unknown| {
            format!(
                "quiet hours: `{}` is not a time zone this server knows; use an IANA name such as Europe/Berlin",
                self.timezone
            )
        })?;
        Ok(())
    }

    /// Whether `at` falls in the hours.
    pub fn holds(&self, at: jiff::Timestamp) -> bool {
        let (Some(from), Some(to)) = (minutes(&self.from), minutes(&self.to)) else { return false };
        let Ok(zone) = jiff::tz::TimeZone::get(&self.timezone) else { return false };
        let local = at.to_zoned(zone);
        let now = u32::from(local.hour().unsigned_abs()) * 60 + u32::from(local.minute().unsigned_abs());
        if from < to {
            (from..to).contains(&now)
        } else {
            now >= from || now < to
        }
    }
}

/// Minutes after midnight of `HH:MM`.
fn minutes(time: &str) -> Option<u32> {
    let (hours, minutes) = time.split_once(':')?;
    let digits = |part: &str| part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(hours) || !digits(minutes) {
        return None;
    }
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (hours < 24 && minutes < 60).then_some(hours * 60 + minutes)
}

/// What a person chose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    #[serde(default)]
    pub content: Content,
    #[serde(default)]
    pub kinds: Kinds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<Quiet>,
}

/// One device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// Its id in the gateway (random).
    pub id: String,
    /// Where its push service takes messages for it.
    pub endpoint: String,
    /// Its browser's public key and auth secret (base64url).
    pub p256dh: String,
    pub auth: String,
    /// What the person sees it as ("Chrome on Android").
    pub label: String,
    /// Seconds since the epoch it was added.
    pub added: u64,
    /// The sign-in it was allowed in ([`crate::store::key`]): the person is followed with it,
    /// and signing out there removes the device.
    pub session: String,
}

/// One person's devices and choices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    #[serde(default)]
    pub settings: Settings,
    #[serde(default)]
    pub devices: Vec<Device>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    /// By channel identity (`web:{issuer}#{sub}`).
    people: BTreeMap<String, Person>,
}

#[derive(Debug, thiserror::Error)]
pub enum DevicesError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not the gateway's list of devices ({source}); move it away (every device then allows notifications again)", path.display())]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    /// What the browser sent cannot be a device: the sentence for the person.
    #[error("{0}")]
    Refused(String),
}

/// The devices of everyone.
#[derive(Debug)]
pub struct Devices {
    path: PathBuf,
    file: Mutex<File>,
    /// Push services besides [`SERVICES`](baaaht_proto::PUSH_SERVICES) a device may name (`https://host[:port]`).
    services: Vec<String>,
}

impl Devices {
    /// The devices in `dir/push.json`; `services` are the origins of push services the
    /// operator named besides the browsers' own.
    pub fn open(dir: &Path, services: Vec<String>) -> Result<Devices, DevicesError> {
        let path = dir.join(FILE);
        let file = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| DevicesError::Corrupt { path: path.clone(), source })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => File { version: 1, ..File::default() },
            Err(source) => return Err(DevicesError::Read { path, source }),
        };
        Ok(Devices { path, file: Mutex::new(file), services })
    }

    /// What `person` has.
    pub fn of(&self, person: &str) -> Person {
        self.lock().people.get(person).cloned().unwrap_or_default()
    }

    /// The people with at least one device.
    pub fn people(&self) -> Vec<(String, Person)> {
        let file = self.lock();
        file.people
            .iter()
            .filter(|(_, person)| !person.devices.is_empty())
            .map(|(id, p)| (id.clone(), p.clone()))
            .collect()
    }

    /// Adds (or, for the same push address, renews) `person`'s device; its id.
    pub fn add(
        &self,
        person: &str,
        endpoint: &str,
        keys: (&str, &str),
        label: &str,
        session: &str,
    ) -> Result<String, DevicesError> {
        self.check_endpoint(endpoint)?;
        Keys::decode(keys.0, keys.1).map_err(|error| DevicesError::Refused(format!("the subscription: {error}")))?;
        let id = crate::store::random_id()
            .map_err(|error| DevicesError::Write { path: self.path.clone(), source: std::io::Error::other(error) })?;
        let id: String = id.chars().take(16).collect();
        let label: String = label.chars().map(|c| if c.is_control() { ' ' } else { c }).take(80).collect();
        let label = baaaht_gateway_kit::text::clean(&label).into_owned();
        let mut file = self.lock();
        // One push address is one device, whoever allowed it last on it (a shared tablet's
        // browser, the next person signed in): with the same keys only, which the browser
        // alone holds, so a push address someone learnt takes nobody's device.
        let elsewhere = file.people.iter().any(|(owner, other)| {
            owner != person
                && other
                    .devices
                    .iter()
                    .any(|device| device.endpoint == endpoint && (device.p256dh != keys.0 || device.auth != keys.1))
        });
        if elsewhere {
            return Err(DevicesError::Refused(
                "this push address belongs to another person's device; allow notifications again in this browser"
                    .into(),
            ));
        }
        for other in file.people.values_mut() {
            other.devices.retain(|device| device.endpoint != endpoint);
        }
        let entry = file.people.entry(person.to_string()).or_default();
        while entry.devices.len() >= MOST_DEVICES {
            entry.devices.remove(0);
        }
        entry.devices.push(Device {
            id: id.clone(),
            endpoint: endpoint.to_string(),
            p256dh: keys.0.to_string(),
            auth: keys.1.to_string(),
            label: if label.trim().is_empty() { "A browser".into() } else { label },
            added: crate::store::now(),
            session: session.to_string(),
        });
        self.save(&file)?;
        Ok(id)
    }

    /// Ties `person`'s device at `endpoint` to sign-in `session` (they signed in again on it);
    /// whether they have one there. Nobody else's device is touched.
    pub fn renew(&self, person: &str, endpoint: &str, session: &str) -> Result<bool, DevicesError> {
        let mut file = self.lock();
        let Some(device) = file
            .people
            .get_mut(person)
            .and_then(|them| them.devices.iter_mut().find(|device| device.endpoint == endpoint))
        else {
            return Ok(false);
        };
        if device.session == session {
            return Ok(true);
        }
        device.session = session.to_string();
        self.save(&file)?;
        Ok(true)
    }

    /// Removes `person`'s device `id`; whether it was there.
    pub fn remove(&self, person: &str, id: &str) -> Result<bool, DevicesError> {
        self.remove_where(|owner, device| owner == person && device.id == id)
    }

    /// Removes the device whose push address is `endpoint` (its service said it is gone).
    pub fn gone(&self, endpoint: &str) -> Result<bool, DevicesError> {
        self.remove_where(|_, device| device.endpoint == endpoint)
    }

    /// Removes the devices allowed in sign-in `session` (it was signed out).
    pub fn signed_out(&self, session: &str) -> Result<bool, DevicesError> {
        self.remove_where(|_, device| device.session == session)
    }

    fn remove_where(&self, doomed: impl Fn(&str, &Device) -> bool) -> Result<bool, DevicesError> {
        let mut file = self.lock();
        let mut removed = false;
        for (owner, person) in &mut file.people {
            let before = person.devices.len();
            person.devices.retain(|device| !doomed(owner, device));
            removed |= person.devices.len() != before;
        }
        if removed {
            self.save(&file)?;
        }
        Ok(removed)
    }

    /// Keeps what `person` chose.
    pub fn choose(&self, person: &str, settings: Settings) -> Result<(), DevicesError> {
        if let Some(quiet) = &settings.quiet {
            quiet.check().map_err(DevicesError::Refused)?;
        }
        let mut file = self.lock();
        file.people.entry(person.to_string()).or_default().settings = settings;
        self.save(&file)
    }

    /// Whether a device may name `endpoint`: an https address of a browser's push service on
    /// 443, or of one the operator named.
    pub fn check_endpoint(&self, endpoint: &str) -> Result<(), DevicesError> {
        let refused = |why: &str| DevicesError::Refused(format!("the push address is refused: {why}"));
        if endpoint.len() > MOST_ENDPOINT || endpoint.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(refused("it is too long or holds spaces"));
        }
        let origin = origin(endpoint).map_err(|_not_https| refused("it is not an https:// address"))?;
        if self.services.contains(&origin) {
            return Ok(());
        }
        let host = origin.trim_start_matches("https://");
        // A name of DNS labels only (no port, no empty label), under a service's own name.
        let labels = |name: &str| {
            name.split('.').all(|label| {
                (1..=63).contains(&label.len()) && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
        };
        let known = labels(host)
            && SERVICES.iter().any(|service| match service.strip_prefix("*.") {
                Some(domain) => host.strip_suffix(domain).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => host == *service,
            });
        if known {
            Ok(())
        } else {
            Err(refused("it is not a push service this site sends to (Chrome's, Edge's, Firefox's or Safari's)"))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, File> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn save(&self, file: &File) -> Result<(), DevicesError> {
        let bytes = serde_json::to_vec_pretty(file)
            .map_err(|error| DevicesError::Write { path: self.path.clone(), source: std::io::Error::other(error) })?;
        baaaht_gateway_kit::state::write_atomic(&self.path, &bytes)
            .map_err(|source| DevicesError::Write { path: self.path.clone(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    #[test]
    fn devices_are_kept_and_removed_and_a_sign_out_takes_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let devices = Devices::open(dir.path(), vec![]).expect("open");
        let first =
            devices.add("alice", "https://fcm.googleapis.com/fcm/send/a", (KEY, AUTH), "Phone", "s1").expect("add");
        devices
            .add("alice", "https://updates.push.services.mozilla.com/wpush/v2/b", (KEY, AUTH), "", "s2")
            .expect("add");
        let reopened = Devices::open(dir.path(), vec![]).expect("reopen");
        let alice = reopened.of("alice");
        assert_eq!(alice.devices.len(), 2);
        assert_eq!(alice.devices[1].label, "A browser");
        assert!(reopened.renew("alice", "https://updates.push.services.mozilla.com/wpush/v2/b", "s3").expect("renew"));
        assert!(!reopened.renew("bob", "https://fcm.googleapis.com/fcm/send/a", "s4").expect("not bob's"));
        assert!(!reopened.signed_out("s2").expect("renewed away from s2"));
        assert!(reopened.signed_out("s3").expect("sign out"));
        assert!(!reopened.remove("bob", &first).expect("not bob's"));
        assert!(reopened.gone("https://fcm.googleapis.com/fcm/send/a").expect("gone"));
        assert!(reopened.people().is_empty());
    }

    #[test]
    fn only_the_push_services_addresses_are_taken() {
        let dir = tempfile::tempdir().expect("tempdir");
        let devices = Devices::open(dir.path(), vec!["https://127.0.0.1:9443".into()]).expect("open");
        for good in [
            "https://fcm.googleapis.com/fcm/send/x",
            "https://wns2-par02p.notify.windows.com/w/?token=x",
            "https://web.push.apple.com/Q/x",
            "https://127.0.0.1:9443/push/1",
        ] {
            assert!(devices.check_endpoint(good).is_ok(), "{good}");
        }
        for bad in [
            "http://fcm.googleapis.com/x",
            "https://127.0.0.1/push",
            "https://127.0.0.1:9444/push",
            "https://169.254.169.254/latest",
            "https://fcm.googleapis.com.evil.example/x",
            "https://notify.windows.com/x",
            "https://evilnotify.windows.com/x",
            "https://user@fcm.googleapis.com/x",
            "https://fcm.googleapis.com:8443/x",
            "https://fcm.googleapis.com/a b",
            "https://evil.invalid\\.notify.windows.com/x",
            "https://evil.invalid%2f.notify.windows.com/x",
            "https://..notify.windows.com/x",
            "https://a..notify.windows.com/x",
            "https://fcm.googleapis.com./x",
        ] {
            assert!(devices.check_endpoint(bad).is_err(), "{bad}");
        }
        let refused = devices.add("alice", "https://fcm.googleapis.com/x", ("AAAA", AUTH), "", "s").expect_err("key");
        assert!(refused.to_string().contains("P-256"), "{refused}");
        // 65 bytes starting 0x04, but no point on the curve.
        let off = format!("BA{}", "A".repeat(85));
        let refused = devices.add("alice", "https://fcm.googleapis.com/x", (&off, AUTH), "", "s").expect_err("point");
        assert!(refused.to_string().contains("P-256"), "{refused}");
    }

    #[test]
    fn a_push_address_moves_to_another_person_only_with_its_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let devices = Devices::open(dir.path(), vec![]).expect("open");
        let tablet = "https://fcm.googleapis.com/fcm/send/tablet";
        devices.add("alice", tablet, (KEY, AUTH), "Tablet\u{202e}gpj.exe\n", "s1").expect("alice's");
        assert_eq!(devices.of("alice").devices[0].label, "Tablet<U+202E>gpj.exe ");
        let other_auth = "AAAAAAAAAAAAAAAAAAAAAA";
        let refused = devices.add("bob", tablet, (KEY, other_auth), "", "s2").expect_err("not with other keys");
        assert!(refused.to_string().contains("another person's device"), "{refused}");
        assert_eq!(devices.of("alice").devices.len(), 1, "still hers");
        devices.add("bob", tablet, (KEY, AUTH), "", "s2").expect("the same browser, bob signed in on it");
        assert!(devices.of("alice").devices.is_empty() && devices.of("bob").devices.len() == 1);
    }

    #[test]
    fn quiet_hours_span_midnight_in_the_persons_time_zone() {
        let quiet = Quiet { from: "22:00".into(), to: "07:00".into(), timezone: "Europe/Berlin".into() };
        quiet.check().expect("valid");
        let at = |text: &str| text.parse::<jiff::Timestamp>().expect("time");
        assert!(quiet.holds(at("2026-12-02T22:30:00Z")), "23:30 in Berlin");
        assert!(quiet.holds(at("2026-12-02T05:59:00Z")), "06:59 in Berlin");
        assert!(!quiet.holds(at("2026-12-02T06:00:00Z")), "07:00 in Berlin");
        assert!(!quiet.holds(at("2026-12-02T12:00:00Z")));
        let day = Quiet { from: "09:00".into(), to: "17:00".into(), timezone: "UTC".into() };
        assert!(day.holds(at("2026-12-02T09:00:00Z")) && !day.holds(at("2026-12-02T17:00:00Z")));
        for (from, to, zone, said) in [
            ("25:00", "07:00", "UTC", "HH:MM"),
            ("22:00", "7:00", "UTC", "HH:MM"),
            ("22:00", "22:00", "UTC", "the same time"),
            ("+1:00", "07:00", "UTC", "HH:MM"),
            ("22:00", "07:00", "Mars/Olympus", "not a time zone"),
        ] {
            let quiet = Quiet { from: from.into(), to: to.into(), timezone: zone.into() };
            let error = quiet.check().expect_err("refused");
            assert!(error.contains(said), "{error}");
        }
    }
}
