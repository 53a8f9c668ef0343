//! The channel compliance suite (as vector's component specification does for every source
//! and sink): what every baaaht channel must do, checked the same way for each. A channel's
//! real gateway runs against one [`FakeDaemon`] — the daemon's Sessions and Gateways services on
//! a Unix socket, with turns scripted by the case and everything the gateway asked recorded —
//! so that a case checks the channel alone. The rules are in `docs/channels.md`; each names the
//! case that checks it ([`cases`]). A channel joins the suite with an adapter ([`Channel`]) and
//! one line: `channel_compliance!(Adapter);`.

pub mod cases;
pub mod channel;
pub mod fake;

pub use channel::Channel;
pub use fake::{FakeDaemon, Step};

/// Every case of [`cases`] as a test of the channel `$channel` (an implementation of
/// [`Channel`]), in the module this is written in (the caller depends on tokio).
#[macro_export]
macro_rules! channel_compliance {
    ($channel:ty) => {
        $crate::channel_compliance!(
            $channel:
            a_message_is_answered_in_its_chat_as_its_person,
            a_message_delivered_again_is_answered_once,
            an_approval_request_is_shown_and_answered_as_its_person,
            a_skill_review_is_shown_and_answered_install_or_decline,
            an_action_is_shown_with_its_real_arguments_and_answered_once_or_deny,
            a_long_answer_is_cut_into_messages_the_channel_holds,
            a_refusal_shows_its_sentence_and_an_internal_failure_only_the_plain_one,
            files_reach_the_daemon_and_the_agents_files_reach_the_chat,
            what_comes_between_turns_reaches_the_chat,
            health_is_degraded_while_the_service_is_away
        );
    };
    ($channel:ty: $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::cases::$case::<$channel>().await;
            }
        )+
    };
}
