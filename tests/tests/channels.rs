//! The channel compliance suite (`baaaht-gateway-compliance`, rules in `docs/channels.md`): every
//! chat channel's real gateway against one fake daemon and its service (a fake, or the real
//! server where one runs here), each case once per channel. What is particular to a service
//! (its wire format, its rate limits, its reconnects, running under the real daemon) stays in
//! that channel's own file.

mod telegram {
    baaaht_gateway_compliance::channel_compliance!(baaaht_tests::channels::telegram::Telegram);
}

mod slack {
    baaaht_gateway_compliance::channel_compliance!(baaaht_tests::channels::slack::Slack);
}

mod email {
    baaaht_gateway_compliance::channel_compliance!(baaaht_tests::channels::email::Email);
}

/// Every case but a delivery made again: Matrix delivers each event once (the gateway's sync
/// token says where it is); the event ids it has taken are checked with the kit's `Seen`, unit-tested.
mod matrix {
    baaaht_gateway_compliance::channel_compliance!(
        baaaht_tests::channels::matrix::Matrix:
        a_message_is_answered_in_its_chat_as_its_person,
        an_approval_request_is_shown_and_answered_as_its_person,
        a_skill_review_is_shown_and_answered_install_or_decline,
        an_action_is_shown_with_its_real_arguments_and_answered_once_or_deny,
        a_long_answer_is_cut_into_messages_the_channel_holds,
        a_refusal_shows_its_sentence_and_an_internal_failure_only_the_plain_one,
        files_reach_the_daemon_and_the_agents_files_reach_the_chat,
        what_comes_between_turns_reaches_the_chat,
        health_is_degraded_while_the_service_is_away,
    );
}
