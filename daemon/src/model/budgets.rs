//! Budgets (DESIGN.md §9.3): tokens and cost per day and per month for every user and group,
//! counted at the daemon's StreamLLM proxy from the providers' usage.
//!
//! Before a request goes to the gateway it is checked and its worst case reserved: a context
//! whose spending plus what its requests in flight may still spend has reached a hard limit
//! is refused with a sentence the user sees, and no provider is asked; the reservation keeps
//! concurrent requests from overshooting together. When the answer ends, the reservation is
//! settled with the provider's usage (priced from `providers.yaml`'s `prices`, or built-in
//! prices for the presets' common models; local servers cost nothing). A cost limit needs a
//! price: a model without one is refused rather than counted as free. At `soft_percent` of a
//! limit the context is warned once per period. Days and months are those of
//! `system.timezone`; the counts live in `data/state/usage/{context}.json` and survive
//! restarts.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::{Context, ContextKind};
use crate::base::config::{BudgetLimits, BudgetsConfig, Price};
use crate::base::datadir::folder_of;
use crate::base::metrics::{Metrics, TokenCounts};
use crate::base::state;

/// Days and months kept in a ledger.
const DAYS_KEPT: usize = 62;
const MONTHS_KEPT: usize = 24;

/// Output tokens assumed for a request that names no maximum.
const DEFAULT_MAX_OUTPUT: u64 = 8_192;

/// Built-in prices (USD per million tokens, input / output) by model-name prefix, for the
/// presets' common models.
const BUILT_IN_PRICES: &[(&str, f64, f64)] = &[
    ("anthropic/claude-opus-4", 15.0, 75.0),
    ("anthropic/claude-sonnet-4", 3.0, 15.0),
    ("anthropic/claude-3-7-sonnet", 3.0, 15.0),
    ("anthropic/claude-3-5-sonnet", 3.0, 15.0),
    ("anthropic/claude-3-5-haiku", 0.8, 4.0),
    ("anthropic/claude-haiku-4", 1.0, 5.0),
    ("openai/gpt-4o-mini", 0.15, 0.6),
    ("openai/gpt-4o", 2.5, 10.0),
    ("openai/gpt-4.1-nano", 0.1, 0.4),
    ("openai/gpt-4.1-mini", 0.4, 1.6),
    ("openai/gpt-4.1", 2.0, 8.0),
    ("openai/o4-mini", 1.1, 4.4),
    ("openai/o3-mini", 1.1, 4.4),
    ("openai/o3", 2.0, 8.0),
    ("deepseek/deepseek-chat", 0.27, 1.1),
    ("deepseek/deepseek-reasoner", 0.55, 2.19),
    ("groq/llama-3.3-70b", 0.59, 0.79),
    ("groq/llama-3.1-8b", 0.05, 0.08),
    ("mistral/mistral-large", 2.0, 6.0),
    ("mistral/mistral-small", 0.2, 0.6),
    ("xai/grok-3-mini", 0.3, 0.5),
    ("xai/grok-3", 3.0, 15.0),
    ("google/gemini-2.5-pro", 1.25, 10.0),
    ("google/gemini-2.5-flash-lite", 0.1, 0.4),
    ("google/gemini-2.5-flash", 0.3, 2.5),
    ("google/gemini-2.0-flash", 0.1, 0.4),
    ("vertex/gemini-2.5-pro", 1.25, 10.0),
    ("vertex/gemini-2.5-flash", 0.3, 2.5),
    ("vertex/claude-opus-4", 15.0, 75.0),
    ("vertex/claude-sonnet-4", 3.0, 15.0),
    ("vertex/claude-3-7-sonnet", 3.0, 15.0),
    ("vertex/claude-3-5-haiku", 0.8, 4.0),
    ("bedrock/anthropic.claude-opus-4", 15.0, 75.0),
    ("bedrock/anthropic.claude-sonnet-4", 3.0, 15.0),
    ("bedrock/anthropic.claude-3-7-sonnet", 3.0, 15.0),
    ("bedrock/anthropic.claude-3-5-haiku", 0.8, 4.0),
    ("bedrock/us.anthropic.claude-sonnet-4", 3.0, 15.0),
    ("bedrock/meta.llama3-3-70b", 0.72, 0.72),
    ("bedrock/meta.llama3-1-8b", 0.22, 0.22),
    ("bedrock/mistral.mistral-large", 2.0, 6.0),
    ("azure/gpt-4o-mini", 0.15, 0.6),
    ("azure/gpt-4o", 2.5, 10.0),
];

/// What cached input of a built-in model costs per million tokens — read, written — at its
/// provider's published rates: Anthropic reads at a tenth of the input price and writes at
/// 1.25×; OpenAI's GPT-4o models read at half, its later ones at a quarter; DeepSeek's cache
/// hits cost about a quarter. Others: the input price.
fn cached_rates(model: &str, input: f64) -> (Option<f64>, Option<f64>) {
    let provider = model.split('/').next().unwrap_or_default();
    match provider {
        "anthropic" | "bedrock" | "vertex" if model.contains("claude") => (Some(input * 0.1), Some(input * 1.25)),
        "openai" if model.starts_with("openai/gpt-4o") || model.starts_with("openai/o3-mini") => {
            (Some(input * 0.5), None)
        }
        "openai" => (Some(input * 0.25), None),
        "deepseek" => (Some(input * 0.26), None),
        _ => (None, None),
    }
}

/// The price of `model` (`provider/model`): in `prices` (providers.yaml's), built in, free on
/// a local server; `None` when unknown.
pub fn price_in(prices: &std::collections::BTreeMap<String, Price>, model: &str) -> Option<Price> {
    if let Some(price) = prices.get(model) {
        return Some(*price);
    }
    let built_in =
        BUILT_IN_PRICES.iter().filter(|(prefix, _, _)| model.starts_with(prefix)).max_by_key(|(p, _, _)| p.len());
    if let Some((_, input, output)) = built_in {
        let (cache_read, cache_write) = cached_rates(model, *input);
        return Some(Price { input: *input, output: *output, cache_read, cache_write });
    }
    let provider = model.split('/').next().unwrap_or_default();
    LOCAL_PROVIDERS.contains(&provider).then(Price::default)
}

/// Providers on the user's own machine: their models cost nothing.
const LOCAL_PROVIDERS: &[&str] = &["ollama", "lmstudio", "vllm"];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// A hard limit is reached: the sentence says which, when it resets and what to do.
    #[error("{0}")]
    Refused(String),
    #[error(
        "{model} has no price, and {context} has a cost limit: add it under `prices` in providers.yaml \
         (input and output, US dollars per million tokens), or ask an admin to remove the cost limit"
    )]
    NoPrice { model: String, context: String },
}

/// What one day or month added up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Spent {
    pub tokens: u64,
    pub cost_micros: u64,
    pub requests: u64,
    pub refused: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Ledger {
    version: u32,
    days: BTreeMap<String, Spent>,
    months: BTreeMap<String, Spent>,
    /// `{period}:{limit}` warned about already.
    warned: Vec<String>,
}

/// The periods "now" falls in, and when they end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Periods {
    pub day: String,
    pub month: String,
    pub day_ends: jiff::Zoned,
    pub month_ends: jiff::Zoned,
}

/// What a request may still spend, held while it runs.
#[derive(Debug)]
pub struct Reservation {
    context: Context,
    tokens: u64,
    cost_micros: u64,
    /// The dearest price along the request's chain: what the reservation counts on, and what
    /// an answer is settled at when the model that gave it has no price of its own.
    price: Option<Price>,
    /// Each model of the chain (`provider/model`, the requested one first) with its price.
    chain: Vec<(String, Option<Price>)>,
}

/// Who answered a request, as the answer's start names it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answered<'a> {
    pub provider: &'a str,
    /// As the provider names it (often with a date after the configured name).
    pub model: &'a str,
}

impl Reservation {
    /// The price of the model that answered: the chain's link for its provider (the one whose
    /// name the answer's model starts with, when the provider is in the chain twice), else
    /// the answer's own `provider/model`, else the dearest of the chain.
    fn price_of(&self, answered: Answered<'_>, prices: impl Fn(&str) -> Option<Price>) -> Option<Price> {
        let of_provider: Vec<&(String, Option<Price>)> = self
            .chain
            .iter()
            .filter(|(model, _)| model.split_once('/').is_some_and(|(provider, _)| provider == answered.provider))
            .collect();
        let link = of_provider
            .iter()
            .find(|(model, _)| {
                model
                    .split_once('/')
                    .is_some_and(|(_, name)| !answered.model.is_empty() && answered.model.starts_with(name))
            })
            .or(of_provider.first());
        match link {
            Some((_, Some(price))) => Some(*price),
            Some((_, None)) => self.price,
            None if answered.provider.is_empty() => self.price,
            None => prices(&format!("{}/{}", answered.provider, answered.model)).or(self.price),
        }
    }
}

/// One context's figures for [`Budgets::report`].
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub limits: BudgetLimits,
    pub today: Spent,
    pub month: Spent,
    pub periods: Periods,
}

#[derive(Debug, Default)]
struct Inner {
    ledgers: HashMap<String, Ledger>,
    /// Context folder → (tokens, micro-dollars) reserved by requests in flight.
    reserved: HashMap<String, (u64, u64)>,
}

/// Every context's budget.
#[derive(Debug)]
pub struct Budgets {
    dir: PathBuf,
    config: BudgetsConfig,
    prices: BTreeMap<String, Price>,
    tz: jiff::tz::TimeZone,
    tz_name: String,
    metrics: Arc<Metrics>,
    inner: Mutex<Inner>,
}

fn kind_of(context: &Context) -> &'static str {
    match context.kind {
        ContextKind::User => "user",
        ContextKind::Group => "group",
    }
}

fn dollars(micros: u64) -> String {
    format!("${:.2}", micros as f64 / 1e6)
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Budgets {
    /// Budgets under `state_dir/usage`, days in time zone `tz_name` (UTC when it is unknown).
    pub fn new(
        state_dir: &std::path::Path,
        config: BudgetsConfig,
        prices: BTreeMap<String, Price>,
        tz_name: &str,
        metrics: Arc<Metrics>,
    ) -> Budgets {
        let tz = jiff::tz::TimeZone::get(tz_name).unwrap_or_else(|error| {
            tracing::warn!(timezone = tz_name, %error, "unknown time zone; budgets count days in UTC");
            jiff::tz::TimeZone::UTC
        });
        Budgets {
            dir: state_dir.join("usage"),
            config,
            prices,
            tz,
            tz_name: tz_name.to_string(),
            metrics,
            inner: Mutex::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits of `context`: its kind's defaults with its override on top.
    pub fn limits(&self, context: &Context) -> BudgetLimits {
        let base = match context.kind {
            ContextKind::User => self.config.user,
            ContextKind::Group => self.config.group,
        };
        match self.config.overrides.get(&context.to_string()) {
            Some(custom) => base.with(custom),
            None => base,
        }
    }

    /// The price of `model` (`provider/model`): configured, built in, free on a local server.
    pub fn price(&self, model: &str) -> Option<Price> {
        price_in(&self.prices, model)
    }

    /// The day and month `at` falls in (in the configured time zone), and when each ends.
    pub fn periods_at(&self, at: jiff::Timestamp) -> Periods {
        let now = at.to_zoned(self.tz.clone());
        let date = now.date();
        let start = |date: jiff::civil::Date| date.to_zoned(self.tz.clone()).unwrap_or_else(|_| now.clone()); // silent-ok: every date has a start in a real zone
        let tomorrow = date.tomorrow().unwrap_or(date);
        let next_month = date.first_of_month().checked_add(jiff::Span::new().months(1)).unwrap_or(date);
        Periods {
            day: date.to_string(),
            month: format!("{:04}-{:02}", date.year(), date.month()),
            day_ends: start(tomorrow),
            month_ends: start(next_month),
        }
    }

    fn periods(&self) -> Periods {
        self.periods_at(jiff::Timestamp::now())
    }

    fn ledger<'a>(&self, inner: &'a mut Inner, folder: &str) -> &'a mut Ledger {
        inner.ledgers.entry(folder.to_string()).or_insert_with(|| {
            let path = self.dir.join(format!("{folder}.json"));
            state::read_json_or_set_aside(&path, || Ledger { version: 1, ..Ledger::default() })
        })
    }

    fn save(&self, folder: &str, ledger: &Ledger) {
        let path = self.dir.join(format!("{folder}.json"));
        let written = std::fs::create_dir_all(&self.dir)
            .map_err(|source| state::StateError::Write { path: path.clone(), source })
            .and_then(|()| state::write_json(&path, ledger));
        if let Err(error) = written {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record budget usage");
        }
    }

    /// Checks `context`'s limits for a request along `chain` (`provider/model`, the requested
    /// model first, then its fallbacks; about `input_tokens` in, at most `max_output` out) and
    /// reserves its worst case at the dearest price of the chain; refuses when a hard limit is
    /// reached.
    pub fn reserve(
        &self,
        context: &Context,
        chain: &[String],
        input_tokens: u64,
        max_output: Option<u64>,
    ) -> Result<Reservation, BudgetError> {
        let limits = self.limits(context);
        let model = chain.first().map(String::as_str).unwrap_or_default();
        let chain: Vec<(String, Option<Price>)> =
            chain.iter().map(|model| (model.clone(), self.price(model))).collect();
        if limits.limits_cost() && chain.first().is_none_or(|(_, price)| price.is_none()) {
            self.metrics.record_budget(kind_of(context), "refused");
            return Err(BudgetError::NoPrice { model: model.to_string(), context: context.to_string() });
        }
        let tokens = input_tokens + max_output.filter(|n| *n > 0).unwrap_or(DEFAULT_MAX_OUTPUT);
        let cost_of = |p: &Price| (input_tokens as f64 * p.input + (tokens - input_tokens) as f64 * p.output) as u64;
        let price = chain.iter().filter_map(|(_, price)| *price).max_by_key(cost_of);
        let cost_micros = price.as_ref().map_or(0, cost_of);
        let periods = self.periods();
        let folder = folder_of(context);
        let mut inner = self.inner();
        if let Some(sentence) = self.over_now(&mut inner, context, &limits, &periods, &folder) {
            let ledger = self.ledger(&mut inner, &folder);
            ledger.days.entry(periods.day.clone()).or_default().refused += 1;
            ledger.months.entry(periods.month.clone()).or_default().refused += 1;
            let snapshot = ledger.clone();
            drop(inner);
            self.save(&folder, &snapshot);
            self.metrics.record_budget(kind_of(context), "refused");
            tracing::info!(context = %context, "request refused at a budget limit");
            return Err(BudgetError::Refused(sentence));
        }
        let entry = inner.reserved.entry(folder).or_default();
        entry.0 += tokens;
        entry.1 += cost_micros;
        Ok(Reservation { context: context.clone(), tokens, cost_micros, price, chain })
    }

    /// Why `context` could not use `model` now (a cost limit and no price, or a hard limit
    /// reached by spending and requests in flight), without reserving anything; `None`: it can.
    pub fn refusal(&self, context: &Context, model: &str) -> Option<String> {
        let limits = self.limits(context);
        if limits.limits_cost() && self.price(model).is_none() {
            return Some(BudgetError::NoPrice { model: model.to_string(), context: context.to_string() }.to_string());
        }
        let mut inner = self.inner();
        self.over_now(&mut inner, context, &limits, &self.periods(), &folder_of(context))
    }

    /// The sentence for the first hard limit of `context` (its ledger in `folder`) that its
    /// spending and its requests in flight have reached in `periods`.
    fn over_now(
        &self,
        inner: &mut Inner,
        context: &Context,
        limits: &BudgetLimits,
        periods: &Periods,
        folder: &str,
    ) -> Option<String> {
        let (reserved_tokens, reserved_cost) = inner.reserved.get(folder).copied().unwrap_or_default();
        let ledger = self.ledger(inner, folder);
        let today = ledger.days.get(&periods.day).copied().unwrap_or_default();
        let month = ledger.months.get(&periods.month).copied().unwrap_or_default();
        self.over(context, limits, periods, today, month, reserved_tokens, reserved_cost)
    }

    /// The sentence for the first hard limit that spending plus reservations has reached.
    #[allow(clippy::too_many_arguments)]
    fn over(
        &self,
        context: &Context,
        limits: &BudgetLimits,
        periods: &Periods,
        today: Spent,
        month: Spent,
        reserved_tokens: u64,
        reserved_cost: u64,
    ) -> Option<String> {
        let whose = match context.kind {
            ContextKind::User => "your".to_string(),
            ContextKind::Group => format!("the group {}'s", context.id),
        };
        let resets_day = format!("it resets tomorrow at 00:00 ({})", self.tz_name);
        let resets_month = format!("it resets on {}", periods.month_ends.strftime("%-d %b"));
        let checks: [(&str, u64, u64, bool, &str, &String); 4] = [
            ("daily_tokens", limits.daily_tokens, today.tokens + reserved_tokens, false, "daily", &resets_day),
            ("monthly_tokens", limits.monthly_tokens, month.tokens + reserved_tokens, false, "monthly", &resets_month),
            (
                "daily_cost",
                (limits.daily_cost * 1e6) as u64,
                today.cost_micros + reserved_cost,
                true,
                "daily",
                &resets_day,
            ),
            (
                "monthly_cost",
                (limits.monthly_cost * 1e6) as u64,
                month.cost_micros + reserved_cost,
                true,
                "monthly",
                &resets_month,
            ),
        ];
        let (key, limit, used, money, period, resets) =
            checks.into_iter().find(|(_, limit, used, _, _, _)| *limit > 0 && used >= limit)?;
        let (limit_text, used_text) = if money {
            (dollars(limit), format!("{} spent", dollars(used)))
        } else {
            (format!("{} tokens", thousands(limit)), format!("{} used", thousands(used)))
        };
        let raised = if money { format!("{:.0}", limit as f64 / 1e6 * 2.0) } else { (limit * 2).to_string() };
        Some(format!(
            "{whose} {period} budget of {limit_text} is used up ({used_text}); {resets}; an admin can raise it in \
             config.yaml: budgets: {{overrides: {{\"{context}\": {{{key}: {raised}}}}}}}"
        ))
    }

    /// Settles `reservation` with what the answer used (nothing when it failed before any
    /// usage came), at the price of the model that `answered`; returns a warning when this
    /// answer took the context past the soft share of a limit for the first time in this
    /// period.
    pub fn settle(
        &self,
        reservation: Reservation,
        used: Option<TokenCounts>,
        answered: Answered<'_>,
    ) -> Option<String> {
        let folder = folder_of(&reservation.context);
        let periods = self.periods();
        let (tokens, cost_micros) = match used {
            Some(used) => {
                let price = reservation.price_of(answered, |model| self.price(model)).unwrap_or_default();
                let cost = used.input as f64 * price.input
                    + used.output as f64 * price.output
                    + used.cache_read as f64 * price.cache_read.unwrap_or(price.input)
                    + used.cache_write as f64 * price.cache_write.unwrap_or(price.input);
                let tokens = [used.output, used.cache_read, used.cache_write]
                    .iter()
                    .fold(used.input, |sum, n| sum.saturating_add(*n));
                (tokens, cost as u64)
            }
            None => (0, 0),
        };
        let limits = self.limits(&reservation.context);
        let mut inner = self.inner();
        if let Some(entry) = inner.reserved.get_mut(&folder) {
            entry.0 = entry.0.saturating_sub(reservation.tokens);
            entry.1 = entry.1.saturating_sub(reservation.cost_micros);
        }
        used?;
        let ledger = self.ledger(&mut inner, &folder);
        for spent in [
            ledger.days.entry(periods.day.clone()).or_default(),
            ledger.months.entry(periods.month.clone()).or_default(),
        ] {
            spent.tokens = spent.tokens.saturating_add(tokens);
            spent.cost_micros = spent.cost_micros.saturating_add(cost_micros);
            spent.requests += 1;
        }
        while ledger.days.len() > DAYS_KEPT {
            ledger.days.pop_first();
        }
        while ledger.months.len() > MONTHS_KEPT {
            ledger.months.pop_first();
        }
        let today = ledger.days[&periods.day];
        let month = ledger.months[&periods.month];
        let soft = f64::from(self.config.soft_percent.clamp(1, 100)) / 100.0;
        let candidates = [
            ("daily_tokens", &periods.day, limits.daily_tokens as f64, today.tokens as f64, false, "daily"),
            ("monthly_tokens", &periods.month, limits.monthly_tokens as f64, month.tokens as f64, false, "monthly"),
            ("daily_cost", &periods.day, limits.daily_cost, today.cost_micros as f64 / 1e6, true, "daily"),
            ("monthly_cost", &periods.month, limits.monthly_cost, month.cost_micros as f64 / 1e6, true, "monthly"),
        ];
        let mut warning = None;
        for (key, period, limit, used, money, name) in candidates {
            let mark = format!("{period}:{key}");
            if limit <= 0.0 || used < limit * soft || ledger.warned.contains(&mark) {
                continue;
            }
            ledger.warned.push(mark);
            let whose = match reservation.context.kind {
                ContextKind::User => "You have".to_string(),
                ContextKind::Group => format!("The group {} has", reservation.context.id),
            };
            let (used_text, limit_text) = if money {
                (format!("${used:.2}"), format!("${limit:.2}"))
            } else {
                (thousands(used as u64), format!("{} tokens", thousands(limit as u64)))
            };
            warning = Some(format!(
                "{whose} used {:.0}% of the {name} budget ({used_text} of {limit_text}); at the limit, requests are refused until it resets.",
                used / limit * 100.0
            ));
            break;
        }
        let keep_marks_since = periods.month.clone();
        ledger.warned.retain(|mark| mark.as_str() >= keep_marks_since.as_str());
        let snapshot = ledger.clone();
        drop(inner);
        self.save(&folder, &snapshot);
        self.metrics.record_budget_cost(kind_of(&reservation.context), cost_micros);
        if warning.is_some() {
            self.metrics.record_budget(kind_of(&reservation.context), "warned");
        }
        warning
    }

    /// `context`'s figures now.
    pub fn report(&self, context: &Context) -> Report {
        let periods = self.periods();
        let limits = self.limits(context);
        let folder = folder_of(context);
        let mut inner = self.inner();
        let ledger = self.ledger(&mut inner, &folder);
        Report {
            limits,
            today: ledger.days.get(&periods.day).copied().unwrap_or_default(),
            month: ledger.months.get(&periods.month).copied().unwrap_or_default(),
            periods,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::config::BudgetLimitsOverride;

    fn budgets(temp: &tempfile::TempDir, user: BudgetLimits, soft_percent: u32) -> Budgets {
        let config = BudgetsConfig {
            soft_percent,
            user,
            group: BudgetLimits::default(),
            overrides: BTreeMap::from([(
                "user:rich".into(),
                BudgetLimitsOverride { monthly_cost: Some(0.0), ..Default::default() },
            )]),
        };
        let prices =
            BTreeMap::from([("custom/cheap".to_string(), Price { input: 1.0, output: 2.0, ..Price::default() })]);
        Budgets::new(temp.path(), config, prices, "Europe/Berlin", Arc::new(Metrics::default()))
    }

    fn chain(model: &str) -> Vec<String> {
        vec![model.to_string()]
    }

    fn tokens(input: u64, output: u64) -> TokenCounts {
        TokenCounts { input, output, ..TokenCounts::default() }
    }

    #[test]
    fn a_hard_limit_refuses_with_a_sentence_and_a_soft_one_warns_once() {
        let temp = tempfile::tempdir().expect("tempdir");
        let limits = BudgetLimits { daily_tokens: 100, ..BudgetLimits::default() };
        let alice = Context::user("alice");
        let book = budgets(&temp, limits, 50);
        let first = book.reserve(&alice, &chain("ollama/llama3"), 10, Some(20)).expect("first");
        assert_eq!(book.settle(first, Some(tokens(20, 10)), Answered::default()), None, "30% is below the soft share");
        let second = book.reserve(&alice, &chain("ollama/llama3"), 10, Some(20)).expect("second");
        let warned = book.settle(second, Some(tokens(20, 10)), Answered::default()).expect("60% warns");
        assert!(warned.starts_with("You have used 60% of the daily budget (60 of 100 tokens)"), "{warned}");
        let third = book.reserve(&alice, &chain("ollama/llama3"), 10, Some(20)).expect("third");
        assert_eq!(book.settle(third, Some(tokens(30, 20)), Answered::default()), None, "a warning comes once");
        let refused = book.reserve(&alice, &chain("ollama/llama3"), 10, Some(20)).expect_err("110 of 100");
        let text = refused.to_string();
        assert!(
            text.starts_with(
                "your daily budget of 100 tokens is used up (110 used); it resets tomorrow at 00:00 (Europe/Berlin)"
            ),
            "{text}"
        );
        assert!(text.contains(r#"budgets: {overrides: {"user:alice": {daily_tokens: 200}}}"#), "{text}");
        // Another user is unaffected; the counts survive a restart.
        book.reserve(&Context::user("bob"), &chain("ollama/llama3"), 10, Some(20)).expect("bob");
        let reopened = budgets(&temp, limits, 50);
        assert!(reopened.reserve(&alice, &chain("ollama/llama3"), 10, Some(20)).is_err());
        assert_eq!(reopened.report(&alice).today.tokens, 110);
    }

    #[test]
    fn reservations_keep_concurrent_requests_from_overshooting_and_cost_needs_a_price() {
        let temp = tempfile::tempdir().expect("tempdir");
        let limits = BudgetLimits { monthly_cost: 0.001, ..BudgetLimits::default() };
        let alice = Context::user("alice");
        let book = budgets(&temp, limits, 80);
        // custom/cheap: $1 / $2 per million: 100 in + 400 out at most = 900 micro-dollars.
        let held = book.reserve(&alice, &chain("custom/cheap"), 100, Some(400)).expect("first");
        let second =
            book.reserve(&alice, &chain("custom/cheap"), 100, Some(400)).expect("900 of 1000 held: still below");
        assert!(book.reserve(&alice, &chain("custom/cheap"), 100, Some(400)).is_err(), "1800 held reaches the limit");
        book.settle(second, None, Answered::default());
        book.settle(held, Some(tokens(100, 50)), Answered::default());
        assert_eq!(book.report(&alice).month.cost_micros, 200);
        let error = book.reserve(&alice, &chain("custom/unknown"), 10, None).expect_err("no price");
        assert!(matches!(error, BudgetError::NoPrice { .. }), "{error}");
        // The override lifts the limit for one user.
        book.reserve(&Context::user("rich"), &chain("custom/unknown"), 10, None).expect("no cost limit for rich");
        assert_eq!(book.price("anthropic/claude-sonnet-4-20250514").map(|p| p.output), Some(15.0));
        assert_eq!(book.price("ollama/qwen2.5:7b"), Some(Price::default()));
    }

    #[test]
    fn a_model_picker_is_told_what_a_request_would_be_refused_for_without_anything_reserved() {
        let temp = tempfile::tempdir().expect("tempdir");
        let limits = BudgetLimits { daily_tokens: 100, monthly_cost: 1.0, ..BudgetLimits::default() };
        let alice = Context::user("alice");
        let book = budgets(&temp, limits, 80);
        assert_eq!(book.refusal(&alice, "custom/cheap"), None);
        let unpriced = book.refusal(&alice, "custom/unknown").expect("no price under a cost limit");
        assert!(unpriced.starts_with("custom/unknown has no price"), "{unpriced}");
        assert_eq!(book.refusal(&Context::user("rich"), "custom/unknown"), None, "no cost limit for rich");
        // Asking reserves nothing: the whole budget is still there for a request.
        assert_eq!(book.refusal(&alice, "custom/cheap"), None);
        let held = book.reserve(&alice, &chain("custom/cheap"), 50, Some(50)).expect("100 tokens");
        let used_up = book.refusal(&alice, "custom/cheap").expect("held to the limit");
        assert!(used_up.starts_with("your daily budget of 100 tokens is used up"), "{used_up}");
        book.settle(held, Some(tokens(10, 10)), Answered::default());
        assert_eq!(book.refusal(&alice, "custom/cheap"), None, "settled at 20 of 100");
    }

    #[test]
    fn a_fallback_is_reserved_and_settled_at_its_own_price() {
        let temp = tempfile::tempdir().expect("tempdir");
        let limits = BudgetLimits { monthly_cost: 100.0, ..BudgetLimits::default() };
        let alice = Context::user("alice");
        let book = budgets(&temp, limits, 99);
        // custom/cheap $1/$2 per million, falling back to Claude Opus ($15/$75).
        let chain = vec!["custom/cheap".to_string(), "anthropic/claude-opus-4-20250514".to_string()];
        let reserved = book.reserve(&alice, &chain, 1_000, Some(1_000)).expect("reserved");
        assert_eq!(reserved.cost_micros, 90_000, "the dearest link's worst case: 1000 * 15 + 1000 * 75");
        let fell_back = Answered { provider: "anthropic", model: "claude-opus-4-20250514" };
        book.settle(reserved, Some(tokens(1_000, 1_000)), fell_back);
        assert_eq!(book.report(&alice).month.cost_micros, 90_000, "priced as the model that answered");
        let reserved = book.reserve(&alice, &chain, 1_000, Some(1_000)).expect("reserved");
        book.settle(reserved, Some(tokens(1_000, 1_000)), Answered { provider: "custom", model: "cheap" });
        assert_eq!(book.report(&alice).month.cost_micros, 93_000, "the requested model at its own price");
        // An answer from a provider outside the chain with no price of its own: the dearest.
        let reserved = book.reserve(&alice, &chain, 1_000, Some(1_000)).expect("reserved");
        book.settle(reserved, Some(tokens(1_000, 1_000)), Answered { provider: "elsewhere", model: "x" });
        assert_eq!(book.report(&alice).month.cost_micros, 183_000);
    }

    #[test]
    fn days_and_months_follow_the_time_zone() {
        let temp = tempfile::tempdir().expect("tempdir");
        let book = budgets(&temp, BudgetLimits::default(), 80);
        // 23:30 UTC on 30 Nov is already 1 Dec in Berlin.
        let at: jiff::Timestamp = "2026-11-30T23:30:00Z".parse().expect("timestamp");
        let periods = book.periods_at(at);
        assert_eq!((periods.day.as_str(), periods.month.as_str()), ("2026-12-01", "2026-12"));
        assert_eq!(periods.month_ends.to_string(), "2027-01-01T00:00:00+01:00[Europe/Berlin]");
    }

    #[test]
    fn cached_input_is_priced_at_the_cached_rate() {
        let temp = tempfile::tempdir().expect("tempdir");
        let limits = BudgetLimits { monthly_cost: 100.0, ..BudgetLimits::default() };
        let alice = Context::user("alice");
        let book = budgets(&temp, limits, 80);
        let sonnet = "anthropic/claude-sonnet-4-20250514";
        let price = book.price(sonnet).expect("built in");
        assert!(price.cache_read.is_some_and(|read| (read - 0.3).abs() < 1e-9), "a tenth of $3: {price:?}");
        assert_eq!(price.cache_write, Some(3.75), "1.25× of $3");
        let held = book.reserve(&alice, &chain(sonnet), 10_000, Some(100)).expect("reserved");
        // 1,000 fresh, 9,000 read from the cache, 100 out: 3,000 + 2,700 + 1,500 micro-dollars.
        let used = TokenCounts { input: 1_000, output: 100, cache_read: 9_000, cache_write: 0 };
        book.settle(held, Some(used), Answered::default());
        let month = book.report(&alice).month;
        assert_eq!((month.tokens, month.cost_micros), (10_100, 7_200));
        assert_eq!(book.price("openai/gpt-4.1").and_then(|p| p.cache_read), Some(0.5));
        assert_eq!(book.price("openai/gpt-4o").and_then(|p| p.cache_read), Some(1.25));
        assert_eq!(book.price("groq/llama-3.3-70b").and_then(|p| p.cache_read), None, "the input price");
    }
}
