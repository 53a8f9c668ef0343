//! Voice notes (issue 63): heard on this host by the speech container (whisper.cpp, no network)
//! as their sender's words. Sentences espeak-ng speaks are sent as Telegram voice notes through
//! the fake Bot API and the real gateway; the model is asked what was said.

use std::time::Duration;

use baaaht_tests::fake_telegram::{gateway_for, telegram_options, FakeTelegram};
use baaaht_tests::scenario;
use baaaht_tests::voice::{self, ASKED};

/// What the bot answered to the message `asked` in `chat`, once it is whole.
fn answer_to(fake: &FakeTelegram, chat: i64, asked: i64) -> Option<String> {
    let reply = *fake.replies_to(chat, asked).first()?;
    fake.text_of(chat, reply).filter(|text| text.starts_with("echo:") || text.contains("voice note"))
}

#[test]
fn telegram_voice_notes_are_heard_as_their_senders_words_and_a_forwarded_one_stays_a_file() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeTelegram::start()).expect("fake telegram");
    let mut options = telegram_options();
    options.env.push(("BAAAHT__VOICE__MODEL".into(), voice::model().display().to_string()));
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let (mut errors, mut words) = (0, 0);
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
            let heard = answer.trim_start_matches("echo:").split("[attached:").next().unwrap_or_default().trim().to_string();
            let (wrong, of) = voice::word_errors(said, &heard);
            println!("said {said:?}, heard {heard:?}: {wrong} of {of} words wrong");
            assert!(answer.contains("[attached: uploads/voice-"), "the recording stays attached: {answer}");
            (errors, words) = (errors + wrong, words + of);
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
}
