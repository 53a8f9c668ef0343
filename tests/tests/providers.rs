//! The cloud providers end to end (issue 56): Gemini, Azure OpenAI, Bedrock and Vertex AI, each
//! reached by the real daemon and gateway through `tests/providers/fake_cloud.py` — whose wire
//! formats are proved first against each cloud's official SDK (google-genai, google-auth, boto3,
//! openai, anthropic[vertex]) by `oracle.py` — in front of the scripted Anthropic-wire fake. A
//! delegated tool turn runs through every cloud; a failing cloud falls back to the next; an alias
//! goes to its cheapest provider and away from one that fails; a wrong key, region or deployment
//! is told in a sentence; Vertex's tokens are fetched again before they expire; and the
//! specification's own providers.yaml passes `config check` and answers.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baaaht_tests::fake_cloud::{self, FakeCloud};
use baaaht_tests::fake_provider::{
    anthropic_answer, anthropic_thinking_answer, overloaded, Answer, Asked, FakeProvider, Responder, ANTHROPIC_HELLO,
};
use baaaht_tests::scenario::{self, coder_brain, message, user, HELLO};
use baaaht_tests::{bin, DaemonOptions, TestDaemon};

/// A daemon whose providers are the four clouds at `cloud` (and `extra` providers.yaml after
/// them), every agent on `model`, the gateway a host process.
fn daemon_on(cloud: &FakeCloud, model: &str, extra: &str, env: &[(&str, &str)]) -> TestDaemon {
    let providers = format!("providers:\n{}{extra}", cloud.providers_yaml());
    let mut vars = FakeCloud::env();
    vars.push(("BAAAHT__LLM__GATEWAY".into(), "process".into()));
    vars.push(("BAAAHT__AGENTS__DEFAULT_MODEL".into(), model.into()));
    for (name, value) in env {
        vars.retain(|(known, _)| known != name);
        vars.push((name.to_string(), value.to_string()));
    }
    TestDaemon::start(DaemonOptions {
        env: vars,
        files: vec![("config/providers.yaml".into(), providers)],
        ..Default::default()
    })
    .expect("daemon starts")
}

/// `baaaht doctor --llm model`'s output and whether it passed.
fn doctor(daemon: &TestDaemon, model: &str) -> (bool, String) {
    let output = Command::new(bin("baaaht"))
        .args(["doctor", "--role", "assistant", "--llm", model])
        .env("BAAAHT_SOCKET", daemon.socket())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("doctor runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn the_fake_clouds_speak_the_wire_formats_of_their_official_sdks() {
    let output = Command::new("python3")
        .arg(fake_cloud::folder().join("oracle.py"))
        .output()
        .expect("python3 with the clouds' SDKs (scripts/test installs them)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn a_delegated_tool_turn_runs_through_every_cloud() {
    let rt = baaaht_tests::runtime();
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(coder_brain()))).expect("fake provider");
    let cloud = FakeCloud::start(&upstream, 3600).expect("fake cloud");
    let azure = format!("azure/{}", fake_cloud::AZURE_DEPLOYMENT);
    let models = [
        ("google/gemini-2.5-flash", "gemini"),
        (azure.as_str(), "azure"),
        ("bedrock/anthropic.claude-3-7-sonnet-20250219-v1:0", "bedrock"),
        ("vertex/gemini-2.5-pro", "vertex"),
        ("vertex/claude-sonnet-4@20250514", "vertex-anthropic"),
    ];
    for (model, route) in models {
        let before = cloud.requests(route).expect("the fake's record").len();
        let daemon = daemon_on(&cloud, model, "", &[]);
        rt.block_on(async {
            let mut client = scenario::host_client(&daemon).await.expect("connect");
            let turn = scenario::turn(
                &mut client,
                message(user("alice"), "alice", "Write hello.sh and run it, please."),
                Duration::from_secs(120),
            )
            .await
            .unwrap_or_else(|error| panic!("{model}: {error:#}\n{}", daemon.log_text()));
            let reply = turn
                .reply
                .clone()
                .unwrap_or_else(|| panic!("{model}: no reply: {:?}\n{}", turn.error, daemon.log_text()));
            assert!(reply.content.contains(HELLO), "{model}: {reply:?}");
        });
        let seen = cloud.requests(route).expect("the fake's record");
        // The Assistant twice, the Coder three times: each through this cloud, signed in.
        assert!(seen.len() >= before + 5, "{model}: {} requests reached {route}", seen.len() - before);
        assert!(seen[before..].iter().all(|request| request["auth_ok"] == true), "{model}: {:?}", &seen[before..]);
        // A tool result went back to the model in the cloud's own shape and reached the fake as
        // Anthropic's tool_result with the id of its call.
        let results = seen[before..]
            .iter()
            .flat_map(|request| request["upstream"]["messages"].as_array().cloned().unwrap_or_default())
            .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
            .filter(|block| block["type"] == "tool_result" && block["tool_use_id"] == "toolu_exec_1")
            .count();
        assert!(results > 0, "{model}: the exec result never reached the model by its id");
    }
}

/// An Anthropic-wire answer of "Hello", failing with 529 while `failures` is above zero.
fn failing_then_hello(failures: Arc<AtomicUsize>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |_request| {
        let fail = failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if fail {
            overloaded()
        } else {
            Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false }
        }
    })))
}

#[test]
fn a_failing_cloud_falls_back_and_an_alias_goes_to_its_cheapest_well_provider() {
    let rt = baaaht_tests::runtime();
    let failures = Arc::new(AtomicUsize::new(0));
    let upstream =
        rt.block_on(FakeProvider::start(vec![], Some(failing_then_hello(failures.clone())))).expect("fake provider");
    let cloud = FakeCloud::start(&upstream, 3600).expect("fake cloud");
    let vertex = "vertex/claude-sonnet-4@20250514";
    let bedrock = "bedrock/anthropic.claude-sonnet-4-20250514-v1:0";
    let extra = format!(
        "fallback_chains:\n  bedrock: [{vertex}]\nmodels:\n  sonnet: [{vertex}, {bedrock}]\n\
         prices:\n  {vertex}: {{input: 3, output: 15}}\n  {bedrock}: {{input: 2, output: 10}}\n"
    );
    let daemon = daemon_on(&cloud, "sonnet", &extra, &[("BAAAHT__LLM__RETRY_ATTEMPTS", "1")]);
    let count = |route: &str| cloud.requests(route).expect("the fake's record").len();

    // Bedrock is the cheaper: the alias goes there.
    let (passed, said) = doctor(&daemon, "sonnet");
    assert!(passed, "{said}\n{}", daemon.log_text());
    assert!(said.contains("[ok  ] bedrock answered through the daemon: \"Hello\""), "{said}");

    // Bedrock fails (503): the alias's next provider answers, and the answer says which.
    failures.store(1, Ordering::SeqCst);
    let (passed, said) = doctor(&daemon, "sonnet");
    assert!(passed, "{said}");
    assert!(said.contains("[ok  ] vertex answered through the daemon"), "{said}");

    // While Bedrock's failure is its last word, the alias goes to Vertex first.
    let bedrock_before = count("bedrock");
    let (passed, said) = doctor(&daemon, "sonnet");
    assert!(passed && said.contains("[ok  ] vertex answered"), "{said}");
    assert_eq!(count("bedrock"), bedrock_before, "a failing provider is tried after the well ones");

    // A model pinned to Bedrock is not rerouted by price, but falls back along its chain.
    failures.store(1, Ordering::SeqCst);
    let (passed, said) = doctor(&daemon, bedrock);
    assert!(passed && said.contains("[ok  ] vertex answered"), "{said}");
}

#[test]
fn a_wrong_key_region_or_deployment_is_told_in_a_sentence() {
    let rt = baaaht_tests::runtime();
    let hello = Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false };
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(hello))).expect("fake provider");
    let cloud = FakeCloud::start(&upstream, 3600).expect("fake cloud");
    let daemon = daemon_on(&cloud, "google/gemini-2.5-flash", "", &[("TEST_GEMINI_KEY", "AIza-wrong")]);
    let (passed, said) = doctor(&daemon, "google/gemini-2.5-flash");
    assert!(!passed, "{said}");
    assert!(
        said.contains("google answered 400: API key not valid. Please pass a valid API key. (authentication)"),
        "{said}"
    );
    let (passed, said) = doctor(&daemon, "azure/no-such-deployment");
    assert!(!passed, "{said}");
    assert!(said.contains("azure answered 404: The API deployment for this resource does not exist"), "{said}");
    // A person's pick reaches only what the server offers: no stored prompt or custom model of
    // the operator's AWS account by its ARN, no provider that is not configured.
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        for (model, words) in [
            (
                "bedrock/arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT1:1",
                "a Bedrock ARN is picked only as providers.yaml lists it",
            ),
            ("groq/llama-3.3-70b", "no provider `groq` is configured on this server"),
        ] {
            let request = baaaht_proto::v1::SwitchModelRequest { session_id: "s-none".into(), model: model.into() };
            let refused = client.sessions.switch_model(request).await.expect_err(model);
            assert!(refused.message().contains(words), "{model}: {}", refused.message());
        }
    });
    drop(daemon);

    // Bedrock signing for a region its keys are not scoped to.
    let providers = cloud.providers_yaml().replace(&format!("region: {}", fake_cloud::AWS_REGION), "region: eu-west-3");
    let mut vars = FakeCloud::env();
    vars.push(("BAAAHT__LLM__GATEWAY".into(), "process".into()));
    vars.push(("BAAAHT__AGENTS__DEFAULT_MODEL".into(), "google/gemini-2.5-flash".into()));
    let daemon = TestDaemon::start(DaemonOptions {
        env: vars,
        files: vec![("config/providers.yaml".into(), format!("providers:\n{providers}"))],
        ..Default::default()
    })
    .expect("daemon starts");
    let (passed, said) = doctor(&daemon, "bedrock/anthropic.claude-3-7-sonnet-20250219-v1:0");
    assert!(!passed, "{said}");
    assert!(said.contains("bedrock answered 403: Credential should be scoped to a valid region"), "{said}");
}

#[test]
fn vertex_tokens_are_fetched_again_before_they_expire() {
    let rt = baaaht_tests::runtime();
    let hello = Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false };
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(hello))).expect("fake provider");
    // Tokens live 20 s: the gateway fetches another once half of that has passed (two calls on
    // a loaded host stay well inside the first half).
    let cloud = FakeCloud::start(&upstream, 20).expect("fake cloud");
    let daemon = daemon_on(&cloud, "vertex/gemini-2.5-pro", "", &[]);
    for _ in 0..2 {
        let (passed, said) = doctor(&daemon, "vertex/gemini-2.5-pro");
        assert!(passed, "{said}\n{}", daemon.log_text());
    }
    let issued = || cloud.stats().expect("stats")["tokens_issued"]["google"].as_u64().unwrap_or(0);
    assert_eq!(issued(), 1, "a token is kept while it is good");
    // Waiting out the token's renewal time is the point of the test.
    std::thread::sleep(Duration::from_millis(10_500));
    let (passed, said) = doctor(&daemon, "vertex/gemini-2.5-pro");
    assert!(passed, "{said}");
    assert_eq!(issued(), 2, "a token near its end is replaced before it is refused");
    let exchange = &cloud.requests("google-token").expect("record")[0];
    assert_eq!(exchange["jwt"]["claims"]["scope"], "https://www.googleapis.com/auth/cloud-platform", "{exchange}");
}

#[test]
fn azure_signs_in_with_an_entra_app_from_the_gateways_container() {
    let rt = baaaht_tests::runtime();
    let hello = Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false };
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(hello))).expect("fake provider");
    let cloud = FakeCloud::start(&upstream, 3600).expect("fake cloud");
    let base = cloud.base();
    // The gateway in its container (the default): the resource and its sign-in are both on the
    // host's loopback, at one address, so the token is fetched through the provider's relay.
    let start = |secret: &str| {
        TestDaemon::start(DaemonOptions {
            env: vec![
                ("TEST_ENTRA_SECRET".into(), secret.into()),
                ("BAAAHT__AGENTS__DEFAULT_MODEL".into(), format!("azure/{}", fake_cloud::AZURE_DEPLOYMENT)),
            ],
            files: vec![(
                "config/providers.yaml".into(),
                format!(
                    "providers:\n  azure:\n    api_base: {base}\n    entra:\n      tenant_id: t\n      client_id: c\n      \
                     client_secret: ${{TEST_ENTRA_SECRET}}\n      authority: {base}\n"
                ),
            )],
            ..Default::default()
        })
        .expect("daemon starts")
    };
    let model = format!("azure/{}", fake_cloud::AZURE_DEPLOYMENT);
    let daemon = start("s");
    let (passed, said) = doctor(&daemon, &model);
    assert!(passed, "{said}\n{}", daemon.log_text());
    let exchanges = cloud.requests("entra-token").expect("record");
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(exchanges[0]["body"]["client_id"], "c", "{exchanges:?}");
    let calls = cloud.requests("azure").expect("record");
    assert!(calls.iter().any(|call| call["auth_ok"] == true), "the resource took the app's token: {calls:?}");
    drop(daemon);

    // A wrong secret is told in a sentence that does not repeat it.
    let daemon = start("not-the-secret-9f3e");
    let (passed, said) = doctor(&daemon, &model);
    assert!(!passed, "{said}");
    assert!(said.contains("Invalid client secret provided"), "{said}");
    assert!(!said.contains("not-the-secret-9f3e") && !daemon.log_text().contains("not-the-secret-9f3e"), "{said}");
}

#[test]
fn the_specifications_own_providers_yaml_passes_config_check_and_answers() {
    let rt = baaaht_tests::runtime();
    let hello = Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false };
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(hello))).expect("fake provider");
    // Word for word but for where Anthropic is: this machine's fake.
    let spec = include_str!("../../daemon/src/base/config/spec-providers.yaml").replace(
        "    api_key: \"${ANTHROPIC_API_KEY}\"\n    default: true\n",
        &format!(
            "    api_key: \"${{ANTHROPIC_API_KEY}}\"\n    default: true\n    api_base: {}\n",
            upstream.api_base(baaaht_tests::fake_provider::Wire::Anthropic)
        ),
    );
    assert!(spec.contains("api_base: http://127.0.0.1:"), "the spec's anthropic entry was found");
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![
            ("BAAAHT__LLM__GATEWAY".into(), "process".into()),
            ("ANTHROPIC_API_KEY".into(), "sk-ant-spec".into()),
        ],
        files: vec![("config/providers.yaml".into(), spec)],
        ..Default::default()
    })
    .expect("daemon starts");
    let check = Command::new(bin("baaahtd"))
        .args(["config", "check"])
        .env("BAAAHT_DATA", &daemon.data_dir)
        .output()
        .expect("config check runs");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let (passed, said) = doctor(&daemon, "anthropic/claude-sonnet-4-20250514");
    assert!(passed && said.contains("[ok  ] anthropic answered through the daemon"), "{said}");
}

/// The Assistant thinks, then hands the Worker a task; the Worker answers; the Assistant passes
/// it on. Its thinking goes to Bedrock and back (reasoning with its signature) between the two.
fn thinking_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.turn_results.last() {
                None => anthropic_thinking_answer(
                    "The worker should say it.",
                    "sig-claude-on-bedrock",
                    "",
                    &[(
                        "toolu_delegate_1",
                        "delegate",
                        serde_json::json!({"agent": "worker", "task": "Say done.", "returnDirectly": false}),
                    )],
                ),
                Some(result) => anthropic_answer(&format!("Worker: {result}"), &[]),
            };
        }
        anthropic_answer("done", &[])
    })))
}

#[test]
fn thinking_asked_of_claude_on_bedrock_goes_back_to_it_with_its_signature() {
    let rt = baaaht_tests::runtime();
    let upstream = rt.block_on(FakeProvider::start(vec![], Some(thinking_brain()))).expect("fake provider");
    let cloud = FakeCloud::start(&upstream, 3600).expect("fake cloud");
    let model = "bedrock/anthropic.claude-3-7-sonnet-20250219-v1:0";
    let daemon = daemon_on(&cloud, model, "", &[("BAAAHT__AGENTS__ASSISTANT__THINKING_BUDGET", "2048")]);
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn =
            scenario::turn(&mut client, message(user("alice"), "alice", "Ask the worker."), Duration::from_secs(120))
                .await
                .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert!(reply.content.contains("Worker: done"), "{reply:?}");
    });
    let sent = cloud.requests("bedrock").expect("the fake's record");
    // Asked for thinking the Converse way…
    assert!(
        sent.iter().any(|request| request["body"]["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 2048),
        "{sent:?}"
    );
    // …and its reasoning, signed, went back to Claude in the Assistant's next request.
    let back = sent.iter().any(|request| {
        request["body"]["messages"].as_array().into_iter().flatten().any(|message| {
            message["content"].as_array().into_iter().flatten().any(|block| {
                block["reasoningContent"]["reasoningText"]["signature"] == "sig-claude-on-bedrock"
                    && block["reasoningContent"]["reasoningText"]["text"] == "The worker should say it."
            })
        })
    });
    assert!(back, "the thinking did not go back as Bedrock's reasoning: {sent:?}");
}
