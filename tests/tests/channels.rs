//! The channel compliance suite (`baaaht-gateway-compliance`, rules in `docs/channels.md`): every
//! chat channel's real gateway against one fake daemon and its service's fake, each case once
//! per channel. What is particular to a service (its wire format, its rate limits, its
//! reconnects, running under the real daemon) stays in that channel's own file.

mod telegram {
    baaaht_gateway_compliance::channel_compliance!(baaaht_tests::channels::telegram::Telegram);
}

mod slack {
    baaaht_gateway_compliance::channel_compliance!(baaaht_tests::channels::slack::Slack);
}
