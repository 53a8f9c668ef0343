//! `baaaht users`, `baaaht groups`, `baaaht usage` and `baaaht audit`: what a person reads of
//! users, their channel identities, groups, spending against budgets, and the audit log.

use std::fmt::Write as _;

use baaaht_proto::v1;

/// One user: id, name, whether admin, identities and groups.
pub fn user_text(user: &v1::UserProfile) -> String {
    let mut text = String::new();
    let admin = if user.admin { "  (admin)" } else { "" };
    let name = if user.name.is_empty() { String::new() } else { format!("  \"{}\"", user.name) };
    let _ = writeln!(text, "{}{name}{admin}", user.id);
    for identity in &user.identities {
        let _ = writeln!(text, "    identity  {identity}");
    }
    for group in &user.groups {
        let _ = writeln!(text, "    group     {group}");
    }
    text
}

pub fn users_text(list: &v1::UserList) -> String {
    let mut text = if list.users.is_empty() {
        "no users yet: a user is made the first time a gateway names them\n".to_string()
    } else {
        list.users.iter().map(user_text).collect()
    };
    if !list.waiting.is_empty() {
        text.push_str("\nwaiting to be let in (`baaaht users admit IDENTITY`):\n");
        for waiting in &list.waiting {
            let name = if waiting.name.is_empty() { String::new() } else { format!("  \"{}\"", waiting.name) };
            text.push_str(&format!(
                "  {}{name}  wrote to {} since {}\n",
                waiting.identity, waiting.gateway, waiting.since
            ));
        }
    }
    text
}

pub fn group_text(group: &v1::GroupInfo) -> String {
    let state = if group.active {
        "active".to_string()
    } else if group.deactivated_reason.is_empty() {
        "deactivated".to_string()
    } else {
        format!("deactivated: {}", group.deactivated_reason)
    };
    let name = if group.name.is_empty() { String::new() } else { format!("  \"{}\"", group.name) };
    let members = if group.members.is_empty() { "no members".to_string() } else { group.members.join(", ") };
    format!("{}{name}  [{state}]  made by {}\n    members: {members}\n", group.id, group.origin)
}

pub fn groups_text(list: &v1::GroupList) -> String {
    if list.groups.is_empty() {
        return "no groups\n".into();
    }
    list.groups.iter().map(group_text).collect()
}

fn figures_line(label: &str, figures: &v1::UsageFigures) -> String {
    let tokens = match figures.token_limit {
        0 => format!("{} tokens", figures.tokens),
        limit => format!("{} of {limit} tokens ({}%)", figures.tokens, figures.tokens * 100 / limit.max(1)),
    };
    let cost = if figures.cost_limit_usd > 0.0 {
        format!(
            "${:.2} of ${:.2} ({:.0}%)",
            figures.cost_usd,
            figures.cost_limit_usd,
            figures.cost_usd / figures.cost_limit_usd * 100.0
        )
    } else {
        format!("${:.2}", figures.cost_usd)
    };
    format!("{label:<7} {:<10} {tokens:<32} {cost:<28} resets {}\n", figures.period, figures.resets)
}

/// Today's and this month's figures against the limits (`month`: only the month's).
pub fn usage_text(report: &v1::UsageReport, month_only: bool) -> String {
    let whose = report.context.as_ref().map_or(String::new(), |context| {
        let kind = if context.r#type == v1::ContextType::Group as i32 { "group" } else { "user" };
        format!("{kind}:{}", context.id)
    });
    let mut text = format!("usage of {whose}\n");
    if !month_only {
        if let Some(today) = &report.today {
            text.push_str(&figures_line("today", today));
        }
    }
    if let Some(month) = &report.month {
        text.push_str(&figures_line("month", month));
    }
    if report.requests_refused > 0 {
        let _ = writeln!(text, "{} request(s) refused at a limit this month", report.requests_refused);
    }
    if report.memory_limit > 0 {
        let _ = writeln!(
            text,
            "memory: {} of {} entries; {} messages searchable ({})",
            report.memory_entries,
            report.memory_limit,
            report.indexed_messages,
            baaaht_proto::human_size(report.index_bytes)
        );
    }
    text
}

/// The audit records, one line each: time, kind, outcome, principal, then the particulars.
pub fn audit_text(found: &v1::AuditRecords) -> String {
    if found.records.is_empty() {
        return "no audit records match\n".into();
    }
    let mut text = String::new();
    for record in &found.records {
        let time = record.time.get(..19).unwrap_or(&record.time).replace('T', " ");
        let mut line = format!("{time}  {:<7} {:<15} {}", record.kind, record.outcome, record.principal);
        if !record.context.is_empty() && !record.principal.contains(&record.context) {
            let _ = write!(line, "  in {}", record.context);
        }
        let detail: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&record.detail_json).unwrap_or_default();
        for (key, value) in &detail {
            match value {
                serde_json::Value::String(text) => {
                    let _ = write!(line, "  {key}={text:?}");
                }
                other => {
                    let _ = write!(line, "  {key}={other}");
                }
            }
        }
        if !record.session_id.is_empty() {
            let _ = write!(line, "  session={}", record.session_id);
        }
        let _ = writeln!(text, "{line}");
    }
    text
}

/// The audit records as JSON lines, in the log's own shape.
pub fn audit_json(found: &v1::AuditRecords) -> String {
    let mut text = String::new();
    for record in &found.records {
        let detail: serde_json::Value = serde_json::from_str(&record.detail_json).unwrap_or_default();
        let mut object = serde_json::json!({
            "time": record.time,
            "kind": record.kind,
            "principal": record.principal,
            "outcome": record.outcome,
        });
        for (key, value) in
            [("context", &record.context), ("session", &record.session_id), ("correlation_id", &record.correlation_id)]
        {
            if !value.is_empty() {
                object[key] = serde_json::Value::from(value.as_str());
            }
        }
        if detail.as_object().is_some_and(|detail| !detail.is_empty()) {
            object["detail"] = detail;
        }
        let _ = writeln!(text, "{object}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_reads_as_figures_against_limits() {
        let report = v1::UsageReport {
            context: Some(v1::ContextRef { r#type: v1::ContextType::User as i32, id: "alice".into() }),
            today: Some(v1::UsageFigures {
                tokens: 500,
                cost_usd: 0.5,
                token_limit: 1000,
                cost_limit_usd: 0.0,
                resets: "2026-11-23T00:00:00Z".into(),
                period: "2026-11-22".into(),
            }),
            month: Some(v1::UsageFigures {
                tokens: 500,
                cost_usd: 15.0,
                token_limit: 0,
                cost_limit_usd: 20.0,
                resets: "2026-12-01T00:00:00Z".into(),
                period: "2026-11".into(),
            }),
            requests_refused: 2,
            memory_entries: 12,
            memory_limit: 2000,
            indexed_messages: 340,
            index_bytes: 262_144,
        };
        let text = usage_text(&report, false);
        assert!(text.starts_with("usage of user:alice\ntoday   2026-11-22 500 of 1000 tokens (50%)"), "{text}");
        assert!(text.contains("memory: 12 of 2000 entries; 340 messages searchable ("), "{text}");
        assert!(text.contains("$15.00 of $20.00 (75%)") && text.contains("2 request(s) refused"), "{text}");
        assert!(!usage_text(&report, true).contains("today"));
    }

    #[test]
    fn audit_records_read_as_one_line_each() {
        let found = v1::AuditRecords {
            records: vec![v1::AuditRecord {
                time: "2026-11-23T10:15:02.123Z".into(),
                kind: "egress".into(),
                principal: "container:tool:baaaht-tool-s1 (user:alice)".into(),
                context: "user:alice".into(),
                session_id: "s1".into(),
                correlation_id: "c-1".into(),
                outcome: "refused".into(),
                detail_json: r#"{"host":"10.0.0.1","reason":"private"}"#.into(),
            }],
        };
        assert_eq!(
            audit_text(&found),
            "2026-11-23 10:15:02  egress  refused         container:tool:baaaht-tool-s1 (user:alice)  host=\"10.0.0.1\"  reason=\"private\"  session=s1\n"
        );
        let json: serde_json::Value = serde_json::from_str(audit_json(&found).trim()).expect("json");
        assert_eq!(json["detail"]["host"], "10.0.0.1");
        assert_eq!(json["correlation_id"], "c-1");
        assert_eq!(audit_text(&v1::AuditRecords::default()), "no audit records match\n");
    }
}
