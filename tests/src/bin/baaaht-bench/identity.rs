//! `baaaht-bench identity`: what naming an end user costs per RPC (DESIGN.md §9.1). The same
//! RPC — ListSessions of one user's context — as a host client (the baseline: peer credentials,
//! admin), through a Slack gateway naming the user (token, namespace, identity, privilege check),
//! and through a web gateway that also passes the user's OIDC ID token (signature checked
//! against the issuer's keys, cached after the first call). The three calls alternate, so
//! drift in the machine falls on all of them alike.

use std::time::Instant;

use anyhow::{Context as _, Result};
use baaaht_proto::client::{self, Client, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::oidc::TestIssuer;
use baaaht_tests::{DaemonOptions, TestDaemon};

use crate::{header, Row};

async fn gateway(host: &mut Client, request: v1::AddGatewayRequest) -> Result<Client> {
    let added = host.admin.add_gateway(request).await?.into_inner();
    let socket = added.gateway.context("the added gateway's info")?.socket;
    let options = ConnectOptions { token: Some(added.token), ..ConnectOptions::default() };
    Ok(client::connect(socket.as_ref(), options).await?)
}

/// ListSessions of user `user`, as `identity` (with `id_token`) when given; its time in µs.
async fn list(client: &mut Client, user: &str, identity: Option<&str>, id_token: Option<&str>) -> Result<f64> {
    let filter =
        v1::SessionFilter { user_id: user.into(), context_type: v1::ContextType::User as i32, ..Default::default() };
    let request = match identity {
        Some(identity) => with_user(identity, id_token, filter)?,
        None => tonic::Request::new(filter),
    };
    let started = Instant::now();
    client.sessions.list_sessions(request).await?;
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

pub(crate) fn run(calls: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let issuer = rt.block_on(TestIssuer::start())?;
    // The daemon fetches the issuer's keys through its egress proxy: the loopback issuer is allowlisted.
    let config = format!("tools:\n  web_proxy:\n    allow: [\"127.0.0.1:{}\"]\n", issuer.port);
    let daemon =
        TestDaemon::start(DaemonOptions { files: vec![("config/config.yaml".into(), config)], ..Default::default() })?;
    let mut rows = [
        Row { name: "host client (peer credentials, admin): ListSessions".into(), unit: "µs", values: vec![] },
        Row { name: "slack gateway naming its user: ListSessions".into(), unit: "µs", values: vec![] },
        Row {
            name: "web gateway naming its user with an ID token (warm keys): ListSessions".into(),
            unit: "µs",
            values: vec![],
        },
    ];
    rt.block_on(async {
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
        let slack_request = v1::AddGatewayRequest {
            kind: "slack".into(),
            name: "acme".into(),
            team: "T1".into(),
            mode: "external".into(),
            ..Default::default()
        };
        let mut slack = gateway(&mut host, slack_request).await?;
        let web_request = v1::AddGatewayRequest {
            kind: "web".into(),
            name: "home".into(),
            issuer: issuer.issuer.clone(),
            audience: "baaaht-web".into(),
            mode: "external".into(),
            ..Default::default()
        };
        let mut web = gateway(&mut host, web_request).await?;
        let on_slack = "slack:T1:UALICE";
        let on_web = format!("web:{}#alice-sub", issuer.issuer);
        let token = issuer.token(&issuer.claims("alice-sub", "baaaht-web", -10, 3600));
        // First contact creates a user per identity; linking puts both in one context.
        let alice = slack.gateways.who_am_i(with_user(on_slack, None, v1::WhoAmIRequest {})?).await?.into_inner().id;
        web.gateways.who_am_i(with_user(&on_web, Some(&token), v1::WhoAmIRequest {})?).await?;
        host.admin.link_identities(v1::LinkRequest { first: on_slack.into(), second: on_web.clone() }).await?;
        let context = alice.as_str();
        // Warm up each path (and the JWKS cache) before measuring.
        for _ in 0..50 {
            list(&mut host, context, None, None).await?;
            list(&mut slack, context, Some(on_slack), None).await?;
            list(&mut web, context, Some(&on_web), Some(&token)).await?;
        }
        for _ in 0..calls {
            rows[0].values.push(list(&mut host, context, None, None).await?);
            rows[1].values.push(list(&mut slack, context, Some(on_slack), None).await?);
            rows[2].values.push(list(&mut web, context, Some(&on_web), Some(&token)).await?);
        }
        anyhow::Ok(())
    })?;
    let fetches = issuer.jwks_fetches.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "baaaht-bench identity: ListSessions of one user's context, {calls} calls of each path alternating, \
         client round trip on the daemon's Unix sockets (JWKS fetched {fetches}× in all)\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let (host_p50, slack_p50, web_p50) = (p50[0], p50[1], p50[2]);
    println!(
        "\nprincipal resolution + privilege check: +{:.1} µs per RPC ({:.2}× the host call); \
         ID-token verification with warm keys: +{:.1} µs more",
        slack_p50 - host_p50,
        slack_p50 / host_p50,
        web_p50 - slack_p50
    );
    println!(
        "RESULT host_p50_us={host_p50:.1} gateway_p50_us={slack_p50:.1} gateway_added_us={:.1} \
         id_token_p50_us={web_p50:.1} id_token_added_us={:.1} gateway_vs_host={:.2} jwks_fetches={fetches}",
        slack_p50 - host_p50,
        web_p50 - slack_p50,
        slack_p50 / host_p50
    );
    Ok(())
}

/// WhoAmI as `identity` on `gateway`: its time in µs.
async fn who_am_i(gateway: &mut Client, identity: &str) -> Result<f64> {
    let request = with_user(identity, None, v1::WhoAmIRequest {})?;
    let started = Instant::now();
    gateway.gateways.who_am_i(request).await?;
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

/// `baaaht-bench first-contact`: WhoAmI through a Slack gateway for identities never seen (the
/// daemon makes the user, its profile and records both durably) with few users known and with
/// `users` known, each first contact alternating with the baseline, WhoAmI of a known user.
pub(crate) fn first_contact(users: usize, calls: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default())?;
    let mut rows = [
        Row { name: "known user: WhoAmI".into(), unit: "µs", values: vec![] },
        Row { name: format!("first contact, 0 to {calls} users known"), unit: "µs", values: vec![] },
        Row { name: format!("first contact, {users} users known"), unit: "µs", values: vec![] },
    ];
    let filled = rt.block_on(async {
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
        let request = v1::AddGatewayRequest {
            kind: "slack".into(),
            name: "acme".into(),
            team: "T1".into(),
            mode: "external".into(),
            ..Default::default()
        };
        let mut slack = gateway(&mut host, request).await?;
        let known = "slack:T1:UKNOWN";
        for _ in 0..50 {
            who_am_i(&mut slack, known).await?;
        }
        let mut made = 1;
        for n in 0..calls {
            rows[0].values.push(who_am_i(&mut slack, known).await?);
            rows[1].values.push(who_am_i(&mut slack, &format!("slack:T1:UA{n}")).await?);
            made += 1;
        }
        let started = Instant::now();
        while made < users {
            who_am_i(&mut slack, &format!("slack:T1:UB{made}")).await?;
            made += 1;
        }
        let filled = started.elapsed();
        for n in 0..calls {
            rows[0].values.push(who_am_i(&mut slack, known).await?);
            rows[2].values.push(who_am_i(&mut slack, &format!("slack:T1:UC{n}")).await?);
        }
        anyhow::Ok(filled)
    })?;
    let journal = daemon.data_dir.join("data/state/identities.journal");
    let journal = std::fs::metadata(&journal).map(|meta| meta.len()).unwrap_or_default();
    println!(
        "baaaht-bench first-contact: WhoAmI through a Slack gateway, {calls} new identities at each size, \
         alternating with a known one ({users} users made in {:.1} s)\n",
        filled.as_secs_f64()
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let (known, few, many) = (p50[0], p50[1], p50[2]);
    println!("\nfirst contact with {users} users known costs {:.2}× what it costs with few", many / few);
    println!(
        "RESULT known_p50_us={known:.1} first_contact_few_p50_us={few:.1} first_contact_{users}_p50_us={many:.1} \
         growth={:.2} vs_known={:.2} journal_bytes={journal}",
        many / few,
        many / known
    );
    Ok(())
}

/// `message` as the gateway's user `identity`, with the user's ID token when given.
fn with_user<T>(identity: &str, id_token: Option<&str>, message: T) -> Result<tonic::Request<T>> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(baaaht_proto::USER_HEADER, identity.parse()?);
    if let Some(token) = id_token {
        request.metadata_mut().insert(baaaht_proto::ID_TOKEN_HEADER, token.parse()?);
    }
    Ok(request)
}
