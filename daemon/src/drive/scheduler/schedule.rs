//! When a task runs (spec §15.2, DESIGN.md §9.4): standard 5-field cron expressions, intervals,
//! one-shot timestamps and heartbeat cadences, each computed in the task's time zone.
//!
//! Cron follows Vixie cron's rules across DST changes (`croner` over `jiff`): a slot in a
//! skipped hour runs once at the next valid instant, a fixed-time slot in a repeated hour runs
//! once. An interval is counted from a fixed anchor, so runs never drift however late each one
//! starts. A heartbeat cadence becomes a cron expression whose jitter is drawn once and stored
//! with the task, so a restart does not move it.

use std::fmt;
use std::str::FromStr;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};
use serde::{Deserialize, Serialize};

/// Why a schedule was refused; each message names the field and says what would do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule.cron: {0}")]
    Cron(String),
    #[error("schedule.interval: {0}")]
    Interval(String),
    #[error("schedule.once: {0}")]
    Once(String),
    #[error("schedule.cadence: `{0}` is not a cadence; use hourly, daily, weekly, biweekly or monthly")]
    Cadence(String),
    #[error("active hours: `{0}` is not a time range; write it as 09:00-22:00")]
    ActiveHours(String),
    #[error("timezone: `{0}` is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)")]
    TimeZone(String),
    #[error("schedule: give exactly one of cron, interval, once or cadence")]
    Missing,
    #[error("catch_up: `{0}` is not once, skip or within: DURATION (e.g. within: 2h)")]
    CatchUp(String),
    #[error("catch_up: `{0}` is not a duration; write it like 30m, 2h or 1d")]
    CatchUpDuration(String),
    #[error("catch_up: `{0}` is shorter than a second; give at least 1s")]
    CatchUpTooShort(String),
}

/// The cron fields, in order, with their ranges, for messages.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, 0 and 7 both Sunday"),
];

/// The `@` aliases cron understands, and what each stands for.
const ALIASES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// A parsed 5-field cron expression.
#[derive(Debug, Clone)]
pub struct Cron {
    text: String,
    cron: croner::Cron,
}

impl Cron {
    /// Parses a standard 5-field expression (minute hour day-of-month month day-of-week) or one
    /// of the `@daily`-style aliases; anything else is refused with the bad field named.
    pub fn parse(expression: &str) -> Result<Cron, ScheduleError> {
        let trimmed = expression.trim();
        let text = if trimmed.starts_with('@') {
            let lower = trimmed.to_ascii_lowercase();
            match ALIASES.iter().find(|(alias, _)| *alias == lower) {
                Some((_, standard)) => (*standard).to_string(),
                None => {
                    return Err(ScheduleError::Cron(format!(
                        "`{trimmed}` is not supported; use @hourly, @daily, @weekly, @monthly, @yearly or 5 fields"
                    )))
                }
            }
        } else {
            trimmed.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        let fields: Vec<&str> = text.split(' ').filter(|field| !field.is_empty()).collect();
        if fields.len() != 5 {
            return Err(ScheduleError::Cron(format!(
                "`{trimmed}` has {} field{}; a cron expression has 5: minute hour day-of-month month day-of-week \
                 (e.g. `0 9 * * 1` for Mondays at 09:00)",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" }
            )));
        }
        let parser = croner::parser::CronParser::builder().seconds(croner::parser::Seconds::Disallowed).build();
        if let Ok(cron) = parser.parse(&text) {
            return Ok(Cron { text, cron });
        }
        // Each field alone, the others `*`, so that the message names the one that is wrong.
        for (index, field) in fields.iter().enumerate() {
            let mut alone = ["*"; 5];
            alone[index] = field;
            if let Err(error) = parser.parse(&alone.join(" ")) {
                let (name, range) = FIELDS[index];
                return Err(ScheduleError::Cron(format!(
                    "the {name} field `{field}` is not valid ({error}); it takes {range}, `*`, lists (1,5), ranges \
                     (1-5) and steps (*/15)"
                )));
            }
        }
        let cron = parser.parse(&text).map_err(|error| ScheduleError::Cron(format!("`{trimmed}`: {error}")))?;
        Ok(Cron { text, cron })
    }

    /// The first slot strictly after `after`, in `zone`.
    fn next_after(&self, after: &Zoned) -> Option<Zoned> {
        self.cron.find_next_occurrence(after, false).ok()
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A heartbeat cadence (spec §15.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cadence {
    Hourly,
    Daily,
    Weekly,
    Biweekly,
    Monthly,
}

impl Cadence {
    pub fn as_str(self) -> &'static str {
        match self {
            Cadence::Hourly => "hourly",
            Cadence::Daily => "daily",
            Cadence::Weekly => "weekly",
            Cadence::Biweekly => "biweekly",
            Cadence::Monthly => "monthly",
        }
    }
}

impl FromStr for Cadence {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Cadence, ScheduleError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "hourly" => Ok(Cadence::Hourly),
            "daily" => Ok(Cadence::Daily),
            "weekly" => Ok(Cadence::Weekly),
            "biweekly" | "fortnightly" => Ok(Cadence::Biweekly),
            "monthly" => Ok(Cadence::Monthly),
            _ => Err(ScheduleError::Cadence(text.trim().to_string())),
        }
    }
}

/// The local hours a heartbeat may run in, `09:00-22:00` (a range past midnight, `22:00-06:00`,
/// wraps); minutes of the day, the end excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveHours {
    start: u16,
    end: u16,
}

impl ActiveHours {
    fn contains(self, minute_of_day: u16) -> bool {
        if self.start <= self.end {
            (self.start..self.end).contains(&minute_of_day)
        } else {
            minute_of_day >= self.start || minute_of_day < self.end
        }
    }

    /// The minutes of the day inside both this range and `within` (start, end excluded).
    fn minutes_within(self, within: (u16, u16)) -> Vec<u16> {
        (within.0..within.1).filter(|minute| self.contains(*minute)).collect()
    }
}

impl FromStr for ActiveHours {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<ActiveHours, ScheduleError> {
        let bad = || ScheduleError::ActiveHours(text.trim().to_string());
        let minutes = |part: &str| -> Option<u16> {
            let (hours, minutes) = part.trim().split_once(':')?;
            let (hours, minutes): (u16, u16) = (hours.trim().parse().ok()?, minutes.trim().parse().ok()?);
            (hours <= 24 && minutes < 60 && hours * 60 + minutes <= 24 * 60).then_some(hours * 60 + minutes)
        };
        let (start, end) = text.split_once('-').ok_or_else(bad)?;
        let (start, end) = (minutes(start).ok_or_else(bad)?, minutes(end).ok_or_else(bad)?);
        // 24:00 ends a day (00:00-24:00 is all of it) but starts none: it is 00:00 then.
        let start = start % (24 * 60);
        if start == end || end == 0 && start == 0 {
            return Err(bad());
        }
        Ok(ActiveHours { start, end })
    }
}

impl fmt::Display for ActiveHours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}-{:02}:{:02}", self.start / 60, self.start % 60, self.end / 60, self.end % 60)
    }
}

/// A schedule as stored with its task (spec §15.8): exactly one of cron, interval, once or
/// cadence; a cadence carries the cron its jitter produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Seconds between runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub once: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cadence: Option<Cadence>,
    /// Where an interval's slots are counted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<Timestamp>,
    /// A biweekly cadence runs in weeks (counted from the epoch) of this parity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub week_parity: Option<u8>,
    /// Heartbeats only: `09:00-22:00`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_hours: Option<String>,
}

/// The smallest interval: a task more often than this is a loop, not a schedule.
pub const MIN_INTERVAL: u64 = 60;

/// A schedule ready to compute slots.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    zone: TimeZone,
    active: Option<ActiveHours>,
    week_parity: Option<u8>,
}

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>),
    Interval { every: i64, anchor: Timestamp },
    Once(Timestamp),
}

/// The time zone called `name`.
pub fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    TimeZone::get(name.trim()).map_err(|_unknown| ScheduleError::TimeZone(name.trim().to_string()))
}

impl Schedule {
    /// Checks `spec` and readies it in time zone `zone`.
    pub fn new(spec: &ScheduleSpec, zone: TimeZone) -> Result<Schedule, ScheduleError> {
        let kind = match (&spec.cron, spec.interval, spec.once) {
            (Some(cron), None, None) => Kind::Cron(Box::new(Cron::parse(cron)?)),
            (None, Some(every), None) => {
                if every < MIN_INTERVAL {
                    return Err(ScheduleError::Interval(format!(
                        "{every} seconds is too often; the shortest interval is {MIN_INTERVAL} seconds"
                    )));
                }
                let every = i64::try_from(every)
                    .map_err(|_too_long| ScheduleError::Interval(format!("{every} seconds is too long")))?;
                Kind::Interval { every, anchor: spec.anchor.unwrap_or(Timestamp::UNIX_EPOCH) }
            }
            (None, None, Some(at)) => Kind::Once(at),
            _ => return Err(ScheduleError::Missing),
        };
        let active = spec.active_hours.as_deref().map(str::parse).transpose()?;
        Ok(Schedule { kind, zone, active, week_parity: spec.week_parity })
    }

    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::Once(_))
    }

    fn accepts(&self, slot: &Zoned) -> bool {
        if let Some(active) = self.active {
            let minute = slot.hour() as u16 * 60 + slot.minute() as u16;
            if !active.contains(minute) {
                return false;
            }
        }
        if let Some(parity) = self.week_parity {
            let weeks = slot.timestamp().as_second().div_euclid(7 * 86_400);
            if weeks.rem_euclid(2) as u8 != parity {
                return false;
            }
        }
        true
    }

    /// The first slot strictly after `after`, if there is one.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        /// Slots a filter (active hours, week parity) may pass over before giving up.
        const MOST_SKIPPED: usize = 10_000;
        match &self.kind {
            Kind::Once(at) => (*at > after).then_some(*at),
            Kind::Interval { every, anchor } => {
                if after < *anchor {
                    return Some(*anchor);
                }
                let elapsed = after.as_second() - anchor.as_second();
                let slots = elapsed.div_euclid(*every) + 1;
                anchor.checked_add(SignedDuration::from_secs(slots.checked_mul(*every)?)).ok()
            }
            Kind::Cron(cron) => {
                let mut at = after.to_zoned(self.zone.clone());
                for _ in 0..MOST_SKIPPED {
                    let next = cron.next_after(&at)?;
                    if self.accepts(&next) {
                        return Some(next.timestamp());
                    }
                    at = next;
                }
                None
            }
        }
    }

    /// The last slot at or before `now`, counting from slot `first` (itself included), with how
    /// many slots that makes; `None` when `first` is not due yet.
    pub fn last_due(&self, first: Timestamp, now: Timestamp) -> Option<(Timestamp, u64)> {
        /// Slots walked through to find the last one due (a minutely cron over two weeks).
        const MOST_WALKED: u64 = 20_000;
        if first > now {
            return None;
        }
        if let Kind::Interval { every, anchor } = &self.kind {
            let last = anchor.as_second() + (now.as_second() - anchor.as_second()).div_euclid(*every) * every;
            let last = last.max(first.as_second());
            let count = ((last - first.as_second()) / every + 1) as u64;
            return Some((Timestamp::from_second(last).ok()?, count));
        }
        let (mut slot, mut count) = (first, 1);
        while count < MOST_WALKED {
            match self.next_after(slot) {
                Some(next) if next <= now => {
                    slot = next;
                    count += 1;
                }
                _ => break,
            }
        }
        if count == MOST_WALKED {
            // Too many to walk: the last slot is found by walking back from now instead.
            slot = self.last_at_or_before(now).unwrap_or(slot);
        }
        Some((slot, count))
    }

    /// The last slot at or before `now`, for schedules too dense to walk.
    fn last_at_or_before(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            Kind::Cron(cron) => {
                let at = now.checked_add(SignedDuration::from_secs(1)).ok()?.to_zoned(self.zone.clone());
                let previous = cron.cron.find_previous_occurrence(&at, false).ok()?;
                Some(previous.timestamp())
            }
            _ => None,
        }
    }

    /// The next `count` slots after `after`.
    pub fn upcoming(&self, after: Timestamp, count: usize) -> Vec<Timestamp> {
        let mut slots = Vec::with_capacity(count);
        let mut at = after;
        while slots.len() < count {
            match self.next_after(at) {
                Some(next) => {
                    slots.push(next);
                    at = next;
                }
                None => break,
            }
        }
        slots
    }
}

/// Draws a cadence's jitter (spec §15.3) and returns the schedule it stands for: hourly at a
/// random minute; daily at a random time between 06:00 and 22:59; weekly on a random weekday
/// (Monday to Friday) at such a time; biweekly the same in every other week; monthly on a
/// random day from the 1st to the 28th. With `active`, the time is drawn inside the active
/// hours (hourly runs outside them are skipped).
pub fn cadence_schedule(cadence: Cadence, active: Option<&str>, draw: &mut dyn FnMut(u32) -> u32) -> ScheduleSpec {
    let window = (6 * 60, 23 * 60);
    let active_hours: Option<ActiveHours> = active.and_then(|text| text.parse().ok());
    let time = |draw: &mut dyn FnMut(u32) -> u32| -> (u16, u16) {
        let mut minutes = active_hours.map(|hours| hours.minutes_within(window)).unwrap_or_default();
        if minutes.is_empty() {
            minutes = match active_hours {
                Some(hours) => (0..24 * 60).filter(|minute| hours.contains(*minute)).collect(),
                None => (window.0..window.1).collect(),
            };
        }
        if minutes.is_empty() {
            minutes = (window.0..window.1).collect();
        }
        let minute = minutes[draw(minutes.len() as u32) as usize % minutes.len()];
        (minute / 60, minute % 60)
    };
    let mut spec = ScheduleSpec {
        cadence: Some(cadence),
        active_hours: active_hours.map(|hours| hours.to_string()),
        ..ScheduleSpec::default()
    };
    let cron = match cadence {
        Cadence::Hourly => format!("{} * * * *", draw(60)),
        Cadence::Daily => {
            let (hour, minute) = time(draw);
            format!("{minute} {hour} * * *")
        }
        Cadence::Weekly | Cadence::Biweekly => {
            let day = 1 + draw(5);
            let (hour, minute) = time(draw);
            if cadence == Cadence::Biweekly {
                spec.week_parity = Some(draw(2) as u8);
            }
            format!("{minute} {hour} * * {day}")
        }
        Cadence::Monthly => {
            let day = 1 + draw(28);
            let (hour, minute) = time(draw);
            format!("{minute} {hour} {day} * *")
        }
    };
    spec.cron = Some(cron);
    spec
}

/// A uniformly drawn number below `bound` (0 when `bound` is 0).
pub fn random_below(bound: u32) -> u32 {
    if bound == 0 {
        return 0;
    }
    // silent-ok: without the OS's randomness the jitter is merely not random.
    let value = getrandom::u32().unwrap_or(0);
    value % bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    fn cron_in(expression: &str, zone_name: &str) -> Schedule {
        let spec = ScheduleSpec { cron: Some(expression.into()), ..ScheduleSpec::default() };
        Schedule::new(&spec, zone(zone_name).expect("zone")).expect("schedule")
    }

    fn next_runs(schedule: &Schedule, after: &str, count: usize) -> Vec<String> {
        schedule.upcoming(at(after), count).iter().map(|slot| slot.to_string()).collect()
    }

    #[test]
    fn cron_next_runs_across_both_dst_changes_in_berlin() {
        // 2026-03-29: 02:00 CET becomes 03:00 CEST. 2026-10-25: 03:00 CEST becomes 02:00 CET.
        let daily_0230 = cron_in("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            next_runs(&daily_0230, "2026-03-27T12:00:00Z", 4),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 02:30 does not exist: once, at 03:00 CEST
                "2026-03-30T00:30:00Z", // 02:30 CEST
                "2026-03-31T00:30:00Z",
            ]
        );
        assert_eq!(
            next_runs(&daily_0230, "2026-10-23T12:00:00Z", 4),
            [
                "2026-10-24T00:30:00Z", // 02:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 happens twice: once, the first time
                "2026-10-26T01:30:00Z", // 02:30 CET
                "2026-10-27T01:30:00Z",
            ]
        );
        let daily_0900 = cron_in("0 9 * * *", "Europe/Berlin");
        assert_eq!(
            next_runs(&daily_0900, "2026-03-28T12:00:00Z", 2),
            ["2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"],
            "09:00 local stays 09:00 local across the change"
        );
    }

    #[test]
    fn cron_next_runs_across_both_dst_changes_in_new_york() {
        // 2026-03-08: 02:00 EST becomes 03:00 EDT. 2026-11-01: 02:00 EDT becomes 01:00 EST.
        let daily_0215 = cron_in("15 2 * * *", "America/New_York");
        assert_eq!(
            next_runs(&daily_0215, "2026-03-07T12:00:00Z", 3),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:15:00Z", "2026-03-10T06:15:00Z"],
        );
        let daily_0130 = cron_in("30 1 * * *", "America/New_York");
        assert_eq!(
            next_runs(&daily_0130, "2026-10-31T12:00:00Z", 3),
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"],
            "01:30 happens twice on 2026-11-01: it runs once"
        );
        let monday_9 = cron_in("0 9 * * 1", "America/New_York");
        assert_eq!(next_runs(&monday_9, "2026-10-28T12:00:00Z", 2), ["2026-11-02T14:00:00Z", "2026-11-09T14:00:00Z"],);
    }

    #[test]
    fn cron_month_ends_and_leap_days() {
        let on_31st = cron_in("0 12 31 * *", "UTC");
        assert_eq!(
            next_runs(&on_31st, "2026-01-31T13:00:00Z", 3),
            ["2026-03-31T12:00:00Z", "2026-05-31T12:00:00Z", "2026-07-31T12:00:00Z"],
            "months without a 31st are passed over"
        );
        let feb_29 = cron_in("0 0 29 2 *", "UTC");
        assert_eq!(next_runs(&feb_29, "2026-01-01T00:00:00Z", 2), ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]);
        // Vixie: day-of-month and day-of-week both restricted means either.
        let first_or_monday = cron_in("0 8 1 * 1", "UTC");
        assert_eq!(
            next_runs(&first_or_monday, "2026-05-30T00:00:00Z", 3),
            ["2026-06-01T08:00:00Z", "2026-06-08T08:00:00Z", "2026-06-15T08:00:00Z"],
        );
    }

    #[test]
    fn aliases_are_supported_explicitly_and_others_refused() {
        assert_eq!(Cron::parse("@daily").expect("daily").to_string(), "0 0 * * *");
        assert_eq!(Cron::parse("@HOURLY").expect("hourly").to_string(), "0 * * * *");
        assert_eq!(Cron::parse("@weekly").expect("weekly").to_string(), "0 0 * * 0");
        let error = Cron::parse("@reboot").expect_err("reboot").to_string();
        assert!(error.contains("`@reboot` is not supported"), "{error}");
    }

    #[test]
    fn invalid_expressions_name_the_field() {
        let cases = [
            ("61 * * * *", "the minute field `61`"),
            ("0 24 * * *", "the hour field `24`"),
            ("0 9 32 * *", "the day-of-month field `32`"),
            ("0 9 * 13 *", "the month field `13`"),
            ("0 9 * * 8", "the day-of-week field `8`"),
            ("0 9 * * MON-XYZ", "the day-of-week field `MON-XYZ`"),
            ("0 9 * *", "has 4 fields"),
            ("0 0 9 * * *", "has 6 fields"),
            ("", "has 0 fields"),
        ];
        for (expression, expected) in cases {
            let error = Cron::parse(expression).expect_err(expression).to_string();
            assert!(error.starts_with("schedule.cron: "), "{expression}: {error}");
            assert!(error.contains(expected), "{expression}: {error}");
        }
        assert!(Cron::parse("*/15 9-17 * JAN-MAR mon-fri").is_ok());
    }

    #[test]
    fn intervals_count_from_their_anchor_and_do_not_drift() {
        let spec =
            ScheduleSpec { interval: Some(3600), anchor: Some(at("2026-01-01T00:00:00Z")), ..ScheduleSpec::default() };
        let schedule = Schedule::new(&spec, TimeZone::UTC).expect("schedule");
        assert_eq!(schedule.next_after(at("2025-12-31T12:00:00Z")), Some(at("2026-01-01T00:00:00Z")));
        // However late a run starts, the next slot is on the grid.
        assert_eq!(schedule.next_after(at("2026-01-01T00:59:59.9Z")), Some(at("2026-01-01T01:00:00Z")));
        assert_eq!(schedule.next_after(at("2026-01-01T01:00:00Z")), Some(at("2026-01-01T02:00:00Z")));
        assert_eq!(
            schedule.last_due(at("2026-01-01T01:00:00Z"), at("2026-01-04T00:30:00Z")),
            Some((at("2026-01-04T00:00:00Z"), 72))
        );
        let error = Schedule::new(&ScheduleSpec { interval: Some(5), ..ScheduleSpec::default() }, TimeZone::UTC)
            .expect_err("too often")
            .to_string();
        assert!(error.contains("shortest interval is 60 seconds"), "{error}");
    }

    #[test]
    fn a_one_shot_runs_once() {
        let spec = ScheduleSpec { once: Some(at("2026-03-01T08:00:00Z")), ..ScheduleSpec::default() };
        let schedule = Schedule::new(&spec, TimeZone::UTC).expect("schedule");
        assert_eq!(schedule.upcoming(at("2026-01-01T00:00:00Z"), 3), [at("2026-03-01T08:00:00Z")]);
        assert_eq!(schedule.next_after(at("2026-03-01T08:00:00Z")), None);
        assert!(schedule.is_once());
    }

    #[test]
    fn exactly_one_kind_of_schedule() {
        let both = ScheduleSpec { cron: Some("0 9 * * *".into()), interval: Some(60), ..ScheduleSpec::default() };
        assert_eq!(Schedule::new(&both, TimeZone::UTC).expect_err("both"), ScheduleError::Missing);
        assert_eq!(Schedule::new(&ScheduleSpec::default(), TimeZone::UTC).expect_err("none"), ScheduleError::Missing);
        assert!(zone("Mars/Olympus").is_err());
    }

    #[test]
    fn cadences_draw_their_jitter_inside_the_spec_windows() {
        let mut values = [17u32, 300, 3, 1].into_iter().cycle();
        let mut draw = |bound: u32| values.next().expect("value") % bound.max(1);
        let hourly = cadence_schedule(Cadence::Hourly, None, &mut draw);
        assert_eq!(hourly.cron.as_deref(), Some("17 * * * *"));
        let daily = cadence_schedule(Cadence::Daily, None, &mut draw);
        // Minute 300 of the window from 06:00 is 11:00.
        assert_eq!(daily.cron.as_deref(), Some("0 11 * * *"));
        let weekly = cadence_schedule(Cadence::Biweekly, Some("09:00-10:00"), &mut draw);
        assert_eq!(weekly.active_hours.as_deref(), Some("09:00-10:00"));
        assert!(weekly.week_parity.is_some());
        let cron = Cron::parse(weekly.cron.as_deref().expect("cron")).expect("valid");
        let fields: Vec<&str> = cron.text.split(' ').collect();
        assert_eq!(fields[1], "9", "drawn inside the active hours: {cron}");
        for _ in 0..200 {
            let spec = cadence_schedule(Cadence::Monthly, None, &mut |bound| random_below(bound));
            let cron = spec.cron.expect("cron");
            let fields: Vec<u32> = cron.split(' ').take(3).map(|field| field.parse().expect("number")).collect();
            assert!(fields[0] < 60 && (6..=22).contains(&fields[1]) && (1..=28).contains(&fields[2]), "{cron}");
        }
    }

    #[test]
    fn active_hours_filter_hourly_heartbeats_and_biweekly_skips_every_other_week() {
        let spec = ScheduleSpec {
            cron: Some("30 * * * *".into()),
            active_hours: Some("09:00-11:00".into()),
            ..ScheduleSpec::default()
        };
        let schedule = Schedule::new(&spec, zone("Europe/Berlin").expect("zone")).expect("schedule");
        assert_eq!(
            next_runs(&schedule, "2026-06-01T10:00:00Z", 3),
            ["2026-06-02T07:30:00Z", "2026-06-02T08:30:00Z", "2026-06-03T07:30:00Z"]
        );
        let spec = ScheduleSpec { cron: Some("0 9 * * 1".into()), week_parity: Some(0), ..ScheduleSpec::default() };
        let schedule = Schedule::new(&spec, TimeZone::UTC).expect("schedule");
        let runs = schedule.upcoming(at("2026-06-01T00:00:00Z"), 3);
        assert_eq!(runs[1].as_second() - runs[0].as_second(), 14 * 86_400);
        assert_eq!(runs[2].as_second() - runs[1].as_second(), 14 * 86_400);
        assert!("25:00-26:00".parse::<ActiveHours>().is_err());
        assert!("9-17".parse::<ActiveHours>().is_err());
        assert!("24:00-00:00".parse::<ActiveHours>().is_err());
        assert_eq!("00:00-24:00".parse::<ActiveHours>().expect("all day").to_string(), "00:00-24:00");
        assert_eq!("22:00-06:00".parse::<ActiveHours>().expect("wraps").to_string(), "22:00-06:00");
    }
}
