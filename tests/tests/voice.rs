//! Voice notes (issue 63): heard on this host by the speech container (whisper.cpp, no network)
//! as their sender's words, and answered with a voice note too. Sentences espeak-ng speaks are
//! sent as Telegram voice notes through the fake Bot API and the real gateway; the model is asked
//! what was said; the voice note that comes back is heard again as the answer's words.

use std::time::Duration;

use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
use baaaht_tests::fake_telegram::{gateway_for, telegram_options, FakeTelegram};
use baaaht_tests::scenario::{self, last_user_text};
use baaaht_tests::voice::{self, ANSWERED, ASKED};

/// Says what it heard, then one of the answers espeak-ng speaks well; a message that is only a
/// file is echoed.
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = last_user_text(&Asked::of(request));
        let heard = asked.split("[attached:").next().unwrap_or_default().trim().to_string();
        if heard.is_empty() {
            return anthropic_answer(&format!("echo: {asked}"), &[]);
        }
        let answer = ANSWERED[heard.len() % ANSWERED.len()];
        anthropic_answer(&format!("You said: {heard} {answer}"), &[])
    })))
}

/// What the bot answered to the message `asked` in `chat`, once it is whole.
fn answer_to(fake: &FakeTelegram, chat: i64, asked: i64) -> Option<String> {
    let reply = *fake.replies_to(chat, asked).first()?;
    fake.text_of(chat, reply).filter(|text| text.starts_with("echo:") || text.starts_with("You said:"))
}

/// What `baaaht-speech` hears in `note` (OGG/Opus), on the host.
fn heard_in(note: &[u8]) -> String {
    let folder = tempfile::tempdir().expect("temp");
    let path = folder.path().join("answer.ogg");
    std::fs::write(&path, note).expect("write");
    let heard = std::process::Command::new(baaaht_tests::bin("baaaht-speech"))
        .arg("hear")
        .arg(&path)
        .arg("--model")
        .arg(voice::model())
        .args(["--language", "en"])
        .output()
        .expect("baaaht-speech hear");
    assert!(heard.status.success(), "the spoken answer is not heard: {}", String::from_utf8_lossy(&heard.stderr));
    String::from_utf8_lossy(&heard.stdout).trim().to_string()
}

#[test]
fn telegram_voice_notes_are_heard_as_their_senders_words_answered_aloud_and_a_forwarded_one_stays_a_file() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeTelegram::start()).expect("fake telegram");
    let mut options = telegram_options();
    options.env.push(("BAAAHT__VOICE__MODEL".into(), voice::model().display().to_string()));
    let (_provider, daemon) = scenario::start(&rt, brain(), options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let (mut errors, mut words, mut spoken_errors, mut spoken_words) = (0, 0, 0, 0);
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| !fake.calls_of("getUpdates").is_empty()).await);
        for (n, said) in ASKED.iter().take(4).enumerate() {
            let (note, seconds) = voice::speak(said);
            let update = fake.voice(fake.message(42, "private", 42, "Ada", ""), &format!("vn-{n}"), note, seconds);
            let asked = update["message"]["message_id"].as_i64().expect("id");
            fake.push(update);
            // The first note waits for the speech image to be built.
            let answered = fake.wait_for(Duration::from_secs(600), |fake| answer_to(fake, 42, asked).is_some()).await;
            assert!(answered, "no answer to the voice note {said:?}: {:#?}\n{}", fake.calls(), logs());
            let answer = answer_to(&fake, 42, asked).unwrap_or_default();
            let written = ANSWERED.iter().find(|answered| answer.ends_with(*answered)).copied().unwrap_or_default();
            let heard = answer.trim_start_matches("You said:").trim_end_matches(written).trim().to_string();
            let (wrong, of) = voice::word_errors(said, &heard);
            println!("said {said:?}, heard {heard:?}: {wrong} of {of} words wrong");
            (errors, words) = (errors + wrong, words + of);
            // The answer comes back as a voice note too, which is heard as what was written.
            let before = n;
            let spoken = fake
                .wait_for(Duration::from_secs(120), |fake| {
                    fake.sent_files().iter().filter(|sent| sent.method == "sendVoice" && sent.chat == 42).count() > before
                })
                .await;
            assert!(spoken, "no voice note answered {said:?}: {:#?}\n{}", fake.calls(), logs());
            let note = fake.sent_files().into_iter().filter(|sent| sent.method == "sendVoice").nth(n).expect("the note");
            assert_eq!(note.content_type, "audio/ogg", "{}", note.name);
            let back = heard_in(&note.bytes);
            let (wrong, of) = voice::word_errors(&answer, &back);
            println!("spoke {answer:?}, heard back {back:?}: {wrong} of {of} words wrong");
            (spoken_errors, spoken_words) = (spoken_errors + wrong, spoken_words + of);
        }
        // A voice note forwarded from someone else is their words, not Ada's: a file, not heard.
        let (note, seconds) = voice::speak(ASKED[4]);
        let mut forwarded = fake.voice(fake.message(42, "private", 42, "Ada", ""), "vn-fwd", note, seconds);
        forwarded["message"]["forward_origin"] =
            serde_json::json!({"type": "user", "date": 1_760_000_000, "sender_user": {"id": 99, "is_bot": false, "first_name": "Eve"}});
        let asked = forwarded["message"]["message_id"].as_i64().expect("id");
        fake.push(forwarded);
        assert!(fake.wait_for(Duration::from_secs(120), |fake| answer_to(fake, 42, asked).is_some()).await, "{}", logs());
        let answer = answer_to(&fake, 42, asked).unwrap_or_default();
        assert!(
            answer.starts_with("echo: [attached: uploads/voice-") && !answer.to_lowercase().contains("mother"),
            "a forwarded note is shared as a file, unheard: {answer}"
        );
    });
    let rate = errors as f64 / words as f64;
    println!("word error rate {rate:.3} ({errors} of {words})");
    assert!(rate <= 0.15, "the voice notes were heard with a word error rate of {rate:.3} (at most 0.15)");
    let rate = spoken_errors as f64 / spoken_words as f64;
    println!("the spoken answers heard back: word error rate {rate:.3} ({spoken_errors} of {spoken_words})");
    assert!(rate <= 0.15, "the spoken answers were heard back with a word error rate of {rate:.3} (at most 0.15)");
    // A forwarded note's answer is written only.
    let notes = fake.sent_files().into_iter().filter(|sent| sent.method == "sendVoice").count();
    assert_eq!(notes, 4, "one voice note for each note heard, none for the forwarded one");
}
