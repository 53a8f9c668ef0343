//! `baaaht-bench turn`: a one-tool turn (the Assistant delegates to the Coder, which runs one
//! command and answers) against a fake model that waits 800 ms before its first token and then
//! streams 50 tokens a second, as a hosted model does. The Coder's answer returned directly
//! beside the same turn with `returnDirectly: false` (the Assistant asked again to re-write it),
//! in the same run: time to the first visible word of the answer and to its end, model requests
//! per turn, input tokens per turn. Then a 10-turn conversation: the input tokens its requests
//! send, and what of them a provider with Anthropic's prompt caching reads from its cache.
//!
//! The fake keeps a prompt cache as Anthropic documents it: a request's prefix up to a block
//! marked `cache_control` is written to the cache (at least 1,024 tokens); a later request
//! whose prefix up to a block boundary at most 20 blocks before one of its marks is cached
//! reads that part. Tokens are counted as four characters each.

use std::collections::HashSet;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{Answer, Asked, Responder};
use baaaht_tests::scenario;
use serde_json::{json, Value};

use crate::{header, Row};

/// The model's time to its first token, and its pace after it.
const FIRST_TOKEN: Duration = Duration::from_millis(800);
const TOKEN_EVERY: Duration = Duration::from_millis(20);
/// The fewest tokens Anthropic caches.
const CACHE_MIN_TOKENS: u64 = 1024;
/// How far before a mark Anthropic looks for a cached prefix.
const LOOKBACK_BLOCKS: usize = 20;
/// Words the Coder (or the Assistant re-writing it) answers with.
const ANSWER: &str = "The command ran and printed hello from baaaht. It wrote nothing else, \
                      took no input, and finished without an error; the workspace is as it was \
                      before, with no new files in it.";

/// What one request cost in input tokens.
#[derive(Debug, Clone, Copy, Default)]
struct Input {
    /// The whole prompt: what a provider without caching processes.
    prompt: u64,
    /// Processed afresh (not in the cache).
    fresh: u64,
    read: u64,
    written: u64,
}

/// Anthropic's prompt cache, as its documentation describes it.
#[derive(Default)]
struct PromptCache {
    cached: Mutex<HashSet<u64>>,
    asked: Mutex<Vec<Input>>,
}

fn tokens(text: &str) -> u64 {
    text.len().div_ceil(4) as u64
}

impl PromptCache {
    /// Accounts `body`'s prompt: what it reads from the cache, writes to it, and sends afresh.
    fn account(&self, body: &Value) -> Input {
        // The prompt's blocks in Anthropic's order (tools, system, messages), each without its
        // mark, and whether it carries one.
        let mut blocks: Vec<(String, bool)> = vec![];
        let mut push = |block: &Value, prefix: &str| {
            let marked = block.get("cache_control").is_some();
            let mut bare = block.clone();
            if let Some(object) = bare.as_object_mut() {
                object.remove("cache_control");
            }
            blocks.push((format!("{prefix}{bare}"), marked));
        };
        for tool in body["tools"].as_array().into_iter().flatten() {
            push(tool, "tool:");
        }
        for block in body["system"].as_array().into_iter().flatten() {
            push(block, "system:");
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            let role = message["role"].as_str().unwrap_or_default().to_string();
            for block in message["content"].as_array().into_iter().flatten() {
                push(block, &format!("{role}:"));
            }
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut total = 0;
        let (mut sums, mut hashes) = (vec![], vec![]);
        for (text, _) in &blocks {
            text.hash(&mut hasher);
            total += tokens(text);
            sums.push(total);
            hashes.push(hasher.finish());
        }
        let marks: Vec<usize> = blocks.iter().enumerate().filter(|(_, (_, marked))| *marked).map(|(i, _)| i).collect();
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let read = (0..blocks.len())
            .rev()
            .find(|&i| cached.contains(&hashes[i]) && marks.iter().any(|&mark| mark >= i && mark - i < LOOKBACK_BLOCKS))
            .map_or(0, |i| sums[i]);
        let written_to = marks.iter().map(|&mark| sums[mark]).filter(|&sum| sum >= CACHE_MIN_TOKENS).max().unwrap_or(0);
        for &mark in &marks {
            if sums[mark] >= CACHE_MIN_TOKENS {
                cached.insert(hashes[mark]);
            }
        }
        let written = written_to.saturating_sub(read);
        let input = Input { prompt: total, fresh: total - read - written, read, written };
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).push(input);
        input
    }

    fn asked(&self) -> Vec<Input> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// An Anthropic answer streamed at the model's pace after its first-token wait: `text` a word
/// each chunk, then `calls` (a chunk each), with `input` as its usage. The events around them
/// (message and block starts and stops) ride with their neighbours: they are not tokens.
fn streamed(text: &str, calls: &[(&str, &str, Value)], input: Input) -> Answer {
    let usage = json!({"input_tokens": input.fresh, "cache_read_input_tokens": input.read,
                       "cache_creation_input_tokens": input.written, "output_tokens": 1});
    let message = json!({"id": "msg_bench", "type": "message", "role": "assistant", "content": [],
                         "model": "fake-model", "usage": usage});
    let mut head = sse("message_start", &json!({"type": "message_start", "message": message}));
    let mut chunks: Vec<String> = vec![];
    let mut index = 0;
    if !text.is_empty() {
        let start =
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}});
        head.push_str(&sse("content_block_start", &start));
        for word in text.split_inclusive(' ') {
            let delta =
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": word}});
            chunks.push(std::mem::take(&mut head) + sse("content_block_delta", &delta).as_str());
        }
        if let Some(last) = chunks.last_mut() {
            last.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        }
        index += 1;
    }
    for (id, name, arguments) in calls {
        let start = json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}});
        let delta = json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": arguments.to_string()}});
        let mut call = std::mem::take(&mut head);
        call.push_str(&sse("content_block_start", &start));
        call.push_str(&sse("content_block_delta", &delta));
        call.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        chunks.push(call);
        index += 1;
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    let words = text.split_whitespace().count();
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                       "usage": {"output_tokens": words + 10}});
    let end = sse("message_delta", &delta) + sse("message_stop", &json!({"type": "message_stop"})).as_str();
    match chunks.last_mut() {
        Some(last) => last.push_str(&end),
        None => chunks.push(head + end.as_str()),
    }
    let paced = Answer::Paced { chunks: Arc::new(chunks), interval: TOKEN_EVERY };
    Answer::Later { wait: FIRST_TOKEN, answer: Box::new(paced) }
}

/// The one-tool turn's model; `[rewrite]` in the person's words asks for `returnDirectly: false`.
fn brain(cache: Arc<PromptCache>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        let input = cache.account(&asked.body);
        if asked.offers("delegate") {
            return match asked.turn_results.last() {
                None => {
                    let mut task =
                        json!({"agent": "coder", "task": "Run `echo hello from baaaht` and say what it printed."});
                    if scenario::last_user_text(&asked).contains("[rewrite]") {
                        task["returnDirectly"] = json!(false);
                    }
                    streamed("", &[("toolu_d1", "delegate", task)], input)
                }
                Some(_) => streamed(ANSWER, &[], input),
            };
        }
        match asked.turn_results.last() {
            None => streamed("", &[("toolu_x1", "exec", json!({"command": "echo hello from baaaht"}))], input),
            Some(_) => streamed(ANSWER, &[], input),
        }
    })))
}

/// One turn's measures.
struct Measured {
    first_word_ms: f64,
    end_ms: f64,
    tool_ms: f64,
}

async fn turn(client: &mut Client, session: &str, text: &str) -> Result<Measured> {
    let mut turn = crate::Following::send(client, session, text).await?;
    let (mut first, mut tool_ms) = (None, 0.0);
    loop {
        use v1::orchestrator_event::Event;
        match turn.next().await? {
            Event::TextDelta(delta) if first.is_none() && !delta.text.trim().is_empty() => {
                first = Some(turn.sent_at.elapsed().as_secs_f64() * 1e3);
            }
            Event::Tool(tool) if tool.state == "finished" => tool_ms += tool.duration_ms as f64,
            Event::Reply(reply) => {
                if !reply.content.contains(ANSWER) {
                    bail!("an unexpected reply: {}", reply.content);
                }
                break;
            }
            Event::Error(error) => bail!("the turn failed: {}", error.message),
            _ => {}
        }
    }
    let end_ms = turn.sent_at.elapsed().as_secs_f64() * 1e3;
    Ok(Measured { first_word_ms: first.context("no word streamed")?, end_ms, tool_ms })
}

/// The sums of `inputs`: (prompt, fresh, read, written).
fn sums(inputs: &[Input]) -> Input {
    inputs.iter().fold(Input::default(), |sum, input| Input {
        prompt: sum.prompt + input.prompt,
        fresh: sum.fresh + input.fresh,
        read: sum.read + input.read,
        written: sum.written + input.written,
    })
}

pub(crate) fn run(runs: usize, conversation: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let cache = Arc::new(PromptCache::default());
    let (_fake, daemon) = scenario::start(&rt, brain(cache.clone()), baaaht_tests::DaemonOptions::default())?;
    let mut rows = [
        Row::new("returned directly: message sent → first word of the answer", "ms"),
        Row::new("re-written by the Assistant: message sent → first word of the answer", "ms"),
        Row::new("returned directly: message sent → the answer's end", "ms"),
        Row::new("re-written by the Assistant: message sent → the answer's end", "ms"),
        Row::new("the tool's own time (exec), per turn", "ms"),
        Row::new("returned directly: model requests per turn", "requests"),
        Row::new("re-written by the Assistant: model requests per turn", "requests"),
        Row::new("returned directly: input tokens sent per turn", "tokens"),
        Row::new("re-written by the Assistant: input tokens sent per turn", "tokens"),
    ];
    let (conversation_sums, turns) = rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await?;
        let direct_session = crate::delegation::new_session(&mut client).await?;
        let rewrite_session = crate::delegation::new_session(&mut client).await?;
        // A first turn of each starts the session's containers; not counted.
        turn(&mut client, &direct_session, "Run it.").await?;
        turn(&mut client, &rewrite_session, "Run it. [rewrite]").await?;
        for _ in 0..runs {
            for (rewrite, session) in [(false, &direct_session), (true, &rewrite_session)] {
                let before = cache.asked().len();
                let text = if rewrite { "Run it. [rewrite]" } else { "Run it." };
                let measured = turn(&mut client, session, text).await?;
                let asked = cache.asked();
                let this = &asked[before..];
                let at = usize::from(rewrite);
                rows[at].values.push(measured.first_word_ms);
                rows[2 + at].values.push(measured.end_ms);
                rows[4].values.push(measured.tool_ms);
                rows[5 + at].values.push(this.len() as f64);
                rows[7 + at].values.push(sums(this).prompt as f64);
            }
        }
        // A conversation of `conversation` turns in a session of its own.
        let session = crate::delegation::new_session(&mut client).await?;
        let before = cache.asked().len();
        for _ in 0..conversation {
            turn(&mut client, &session, "Run it.").await?;
        }
        let asked = cache.asked();
        Ok::<_, anyhow::Error>((sums(&asked[before..]), asked.len() - before))
    })?;
    println!(
        "\nbaaaht-bench turn: {runs} one-tool turns each way (the Assistant delegates to the Coder, which runs one \
         command and answers), the fake model waiting {} ms for its first token and streaming {} tokens/s\n",
        FIRST_TOKEN.as_millis(),
        1000 / TOKEN_EVERY.as_millis()
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let ttft = FIRST_TOKEN.as_secs_f64() * 1e3;
    let bound = 3.0 * ttft + p50[4];
    let input = conversation_sums;
    let weighted = input.fresh as f64 + 0.1 * input.read as f64 + 1.25 * input.written as f64;
    // What the model processes: all but what it reads from its cache.
    let processed = input.fresh + input.written;
    let fresh_saved = 1.0 - processed as f64 / input.prompt as f64;
    let cost_saved = 1.0 - weighted / input.prompt as f64;
    println!(
        "\n{conversation}-turn conversation ({turns} requests): {} input tokens in its prompts; with prompt caching {} \
         read from the cache, {} written to it, {} neither",
        input.prompt, input.read, input.written, input.fresh
    );
    println!(
        "  input tokens the model processes (all but those read from its cache): {:.0}% fewer; priced as Anthropic does (read 0.1×, write 1.25×): {:.0}% less",
        fresh_saved * 100.0,
        cost_saved * 100.0
    );
    println!(
        "first word returned directly: {:.0} ms p50 (bound 3 × {ttft:.0} ms + the tool's {:.0} ms = {bound:.0} ms); \
         re-written: {:.0} ms; {:.2}× sooner",
        p50[0],
        p50[4],
        p50[1],
        p50[1] / p50[0]
    );
    println!(
        "RESULT direct_first_word_p50_ms={:.0} rewritten_first_word_p50_ms={:.0} first_word_speedup={:.2} \
         first_word_bound_ms={bound:.0} direct_end_p50_ms={:.0} rewritten_end_p50_ms={:.0} direct_requests={:.0} \
         rewritten_requests={:.0} direct_input_tokens={:.0} rewritten_input_tokens={:.0} \
         conversation_turns={conversation} conversation_prompt_tokens={} conversation_cache_read_tokens={} \
         conversation_processed_tokens={processed} processed_input_saved_pct={:.0} input_cost_saved_pct={:.0}",
        p50[0],
        p50[1],
        p50[1] / p50[0],
        p50[2],
        p50[3],
        p50[5],
        p50[6],
        p50[7],
        p50[8],
        input.prompt,
        input.read,
        fresh_saved * 100.0,
        cost_saved * 100.0
    );
    Ok(())
}
