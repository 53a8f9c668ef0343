//! The house rules the compiler does not check, checked on the daemon's source (ARCHITECTURE.md,
//! "Invariants"): the wire's types only where the daemon speaks a protocol, no task outside the
//! tracker, no two modules importing each other, directly or through others (in any crate of the
//! workspace), and every room in a wing that imports only the wings below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where the wire's types may appear besides `server/`: where the daemon is a client of another
/// process's protocol (the LLM gateway's configuration and stream, the speech service, ContainerHealth, `baaahtd`'s
/// own commands to a running daemon).
const WIRE_CLIENTS: &[&str] = &[
    "model/llm/mod.rs",
    "model/llm/call.rs",
    "model/llm/relay.rs",
    "model/speech/mod.rs",
    "work/health/mod.rs",
    "cli.rs",
];

/// Every `.rs` file below `daemon/src`, by its path from there, without its unit tests.
fn sources() -> BTreeMap<String, String> {
    sources_of(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Every `.rs` file below `root`, by its path from there, without its unit tests.
fn sources_of(root: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read the source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                let code = match unit_tests_at(&text) {
                    Some(at) => text[..at].to_string(),
                    None => text,
                };
                let name = path.strip_prefix(root).expect("below the root").to_string_lossy().into_owned();
                // A file of unit tests only (`scheduler/tests.rs`, `orchestrator/played_tests.rs`).
                if !name.ends_with("tests.rs") {
                    out.insert(name, code);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Where `text`'s unit-test module begins (`#[cfg(test)]`, other attributes, then `mod tests`,
/// private or shared with other modules' tests); they come last in a file.
fn unit_tests_at(text: &str) -> Option<usize> {
    let mut offset = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (index, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            let item = lines[index + 1..].iter().map(|line| line.trim()).find(|line| !line.starts_with("#["));
            let module = item.and_then(|item| item.strip_suffix("mod tests {"));
            if module.is_some_and(|visibility| visibility.is_empty() || visibility.starts_with("pub")) {
                return Some(offset);
            }
        }
        offset += line.len();
    }
    None
}

/// Where `sources` use the wire's types outside `server/` and the protocol clients.
fn wire_outside_server(sources: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = vec![];
    for (file, code) in sources {
        if file.starts_with("server/") || WIRE_CLIENTS.contains(&file.as_str()) {
            continue;
        }
        for (number, line) in code.lines().enumerate() {
            if line.contains("v1::") && !line.trim_start().starts_with("//") {
                found.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_wire_types_appear_only_in_server_and_the_protocol_clients() {
    let found = wire_outside_server(&sources());
    assert!(
        found.is_empty(),
        "the domain speaks its own types; convert in server/from_wire.rs and server/to_wire.rs:\n{}",
        found.join("\n")
    );
}

/// Where `sources` spawn a task of their own.
fn detached_spawns(sources: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = vec![];
    for (file, code) in sources {
        for (number, line) in code.lines().enumerate() {
            if line.contains("tokio::spawn(") && !line.trim_start().starts_with("//") {
                found.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_task_is_spawned_outside_the_tracker() {
    let found = detached_spawns(&sources());
    assert!(
        found.is_empty(),
        "a long-lived task goes on the daemon's tracker (Lifetime::spawn, or the subsystem's TaskTracker):\n{}",
        found.join("\n")
    );
}

/// The module a source file is (`orchestrator`, `mcp::pool`; `lib.rs` is the crate root).
fn module_of(file: &str) -> String {
    let path = file.trim_end_matches(".rs");
    let path = path.strip_suffix("/mod").unwrap_or(path);
    if path == "lib" || path == "main" {
        return String::new();
    }
    path.replace('/', "::")
}

/// The modules `code` (the file of `module`) names with `crate::…`, `super::…` or `use super::*`.
fn imports(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let resolve = |path: &str| -> Option<String> {
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        (1..=segments.len()).rev().map(|n| segments[..n].join("::")).find(|candidate| modules.contains(candidate))
    };
    let own: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    // What `super` is, from this file (the same for `a/b.rs` and `a/b/mod.rs`).
    let parent: Vec<&str> = own[..own.len().saturating_sub(1)].to_vec();
    let mut out = BTreeSet::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let path: String = rest.chars().take_while(|c| ident(*c)).collect();
            let path = path.trim_end_matches(':');
            let mut names: Vec<String> = vec![];
            if let Some(group) = rest[path.len()..].strip_prefix("::{") {
                let group = group.split('}').next().unwrap_or_default();
                names
                    .extend(group.split(',').map(|item| item.trim().split(' ').next().unwrap_or_default().to_string()));
            }
            let full = |tail: &str| {
                let mut segments: Vec<String> = base.iter().map(|s| s.to_string()).collect();
                segments.extend(path.split("::").filter(|s| !s.is_empty()).map(str::to_string));
                segments.extend(tail.split("::").filter(|s| !s.is_empty() && *s != "self").map(str::to_string));
                segments.join("::")
            };
            let targets = if names.is_empty() { vec![full("")] } else { names.iter().map(|n| full(n)).collect() };
            for target in targets {
                if let Some(found) = resolve(&target) {
                    out.insert(found);
                }
            }
            if prefix == "super::" && path == "*" {
                out.insert(base.join("::"));
            }
        }
    }
    if code.contains("use super::*;") {
        out.insert(parent.join("::"));
    }
    out.remove(module);
    out.remove("");
    out
}

/// The circles of `graph`, each as its modules in order from the smallest.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    let mut circle = path.clone();
                    let first = circle.iter().min().cloned().unwrap_or_default();
                    let turn = circle.iter().position(|m| *m == first).unwrap_or(0);
                    circle.rotate_left(turn);
                    found.insert(circle);
                } else if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

/// The folder module `module` is a file of (`mcp` for `mcp::pool`); the crate for a top one.
fn folder_of(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(folder, _)| folder)
}

/// No circle of imports runs between the daemon's modules, directly or through others. A folder
/// module and its own files are the one exception: its files use what it declares and it
/// re-exports what they hold, as Rust's modules do; but its files never import each other
/// both ways, and nothing outside the folder is part of such a circle. The crate root, which
/// wires everything, is not one of them.
fn import_circles(sources: &BTreeMap<String, String>) -> Vec<String> {
    let modules: BTreeSet<String> = sources.keys().map(|file| module_of(file)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in sources {
        let module = module_of(file);
        if module.is_empty() {
            continue;
        }
        let mut edges = imports(&module, code, &modules);
        // A folder module's use of its own files (`pub use turns::run_turn`, `history::window_of`).
        for child in modules.iter().filter(|child| folder_of(child) == module) {
            let name = child.rsplit("::").next().unwrap_or_default();
            let used = code
                .match_indices(&format!("{name}::"))
                .any(|(at, _)| !code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':'));
            if used {
                edges.insert(child.clone());
            }
        }
        edges.remove("");
        graph.insert(module, edges);
    }
    let within_its_folder =
        |circle: &Vec<String>| circle.iter().any(|folder| circle.iter().all(|m| m == folder || folder_of(m) == folder));
    circles(&graph).into_iter().filter(|circle| !within_its_folder(circle)).map(|c| c.join(" → ")).collect()
}

#[test]
fn no_two_modules_import_each_other_even_through_others() {
    let found = import_circles(&sources());
    assert!(found.is_empty(), "modules that import each other:\n{}", found.join("\n"));
}

/// The workspace's crates, as the root `Cargo.toml` lists its members (`gateways/web`).
fn workspace_members() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read the workspace's Cargo.toml");
    let members = manifest.split("members = [").nth(1).and_then(|rest| rest.split(']').next()).unwrap_or_default();
    members.split(',').map(|member| member.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

#[test]
fn no_crate_of_the_workspace_has_an_import_circle() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let members = workspace_members();
    assert!(members.len() > 10 && members.iter().any(|m| m == "gateways/web"), "members: {members:?}");
    let found: Vec<String> = members
        .iter()
        .flat_map(|member| {
            let circles = import_circles(&sources_of(&root.join(member).join("src")));
            circles.into_iter().map(move |circle| format!("{member}: {circle}"))
        })
        .collect();
    assert!(found.is_empty(), "modules that import each other:\n{}", found.join("\n"));
}

/// Where `server/` does part of a turn itself: publishes an event (a domain call does, on its
/// road), or asks the agent pool for a container's live turn (the request layer resolves it
/// once, for every handler).
fn turn_work_in_server(sources: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = vec![];
    for (file, code) in sources.iter().filter(|(file, _)| file.starts_with("server/")) {
        for (number, line) in code.lines().enumerate() {
            let publishes = line.contains(".publish(");
            let resolves = line.contains("agents.live(") && file != "server/layer.rs";
            if (publishes || resolves) && !line.trim_start().starts_with("//") {
                found.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn handlers_publish_no_event_and_read_the_live_turn_from_the_request() {
    let found = turn_work_in_server(&sources());
    assert!(
        found.is_empty(),
        "a handler is wire → one domain call → wire: publish on the domain's road, and take a container's \
         live turn with `live_turn(&request)`:\n{}",
        found.join("\n")
    );
}

/// Where `sources` break a room's monopoly: a configuration file (`config.yaml`,
/// `providers.yaml`, `mount-allowlist.json`) read outside `base/config/`, the process ended
/// outside `main.rs`, or the engine's client used outside `sandbox/container/`.
fn monopolies_broken(sources: &BTreeMap<String, String>) -> Vec<String> {
    let configuration =
        ["CONFIG_FILE", "PROVIDERS_FILE", "ALLOWLIST_FILE", "config.yaml", "providers.yaml", "allowlist.json"];
    let mut found = vec![];
    for (file, code) in sources {
        for (number, line) in code.lines().enumerate() {
            let reads = ["fs::read", "File::open", "OpenOptions"].iter().any(|open| line.contains(open));
            let config =
                reads && configuration.iter().any(|name| line.contains(name)) && !file.starts_with("base/config/");
            let exits = line.contains("process::exit") && file != "main.rs";
            let engine = line.contains("bollard::") && !file.starts_with("sandbox/container/");
            if (config || exits || engine) && !line.trim_start().starts_with("//") {
                found.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn only_their_rooms_read_the_configuration_end_the_process_and_speak_to_the_engine() {
    let found = monopolies_broken(&sources());
    assert!(
        found.is_empty(),
        "the configuration is read by base::config (load, or text_of for an edit), the exit code is main's, \
         and only sandbox/container/ speaks to the engine:\n{}",
        found.join("\n")
    );
}

/// The daemon's wings, from the top: a wing's rooms import only the wings after it in this list.
/// `lib.rs`, `main.rs` and `cli.rs` compose them and stand beside them.
const WINGS: &[&str] =
    &["server", "ops", "drive", "model", "work", "people", "net", "store", "sandbox", "guard", "base"];

/// What composes the wings: the only files of the daemon outside one.
const COMPOSERS: &[&str] = &["lib.rs", "main.rs", "cli.rs"];

/// Where `sources` break the wing order: a file outside every wing (and not a composer), or an
/// import of a wing above the importer's own.
fn wing_breaches(sources: &BTreeMap<String, String>) -> Vec<String> {
    let modules: BTreeSet<String> = sources.keys().map(|file| module_of(file)).collect();
    let rank = |module: &str| WINGS.iter().position(|wing| module.split("::").next() == Some(*wing));
    let mut found = vec![];
    for (file, code) in sources {
        if COMPOSERS.contains(&file.as_str()) {
            continue;
        }
        let module = module_of(file);
        let Some(own) = rank(&module) else {
            found.push(format!("{file} is in no wing: move it into the wing of its noun ({})", WINGS.join(", ")));
            continue;
        };
        for imported in imports(&module, code, &modules) {
            if let Some(other) = rank(&imported).filter(|other| *other < own) {
                found.push(format!("{module} ({}) imports {imported} ({}), a wing above it", WINGS[own], WINGS[other]));
            }
        }
    }
    found
}

#[test]
fn no_wing_imports_a_wing_above_it() {
    let found = wing_breaches(&sources());
    assert!(
        found.is_empty(),
        "a wing imports only the wings below it (ARCHITECTURE.md, \"Wings\"); move what both need down, or \
         hand it in from the composer:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_find_what_they_look_for() {
    let sources = |files: &[(&str, &str)]| -> BTreeMap<String, String> {
        files.iter().map(|(file, code)| (file.to_string(), code.to_string())).collect()
    };
    let house = sources(&[
        ("lib.rs", "pub mod a; pub mod b; pub mod f;"),
        ("a.rs", "use crate::b::Thing;"),
        ("b.rs", "fn x() { crate::f::go(); }"),
        ("f/mod.rs", "mod p; mod q; pub use p::go;"),
        ("f/p.rs", "use super::*; use super::q::Q;"),
        ("f/q.rs", "pub struct Q;"),
        ("server/x.rs", "fn y() -> v1::Ack { tokio::task::spawn_blocking(f) }"),
    ]);
    assert!(import_circles(&house).is_empty(), "{:?}", import_circles(&house));
    assert!(wire_outside_server(&house).is_empty() && detached_spawns(&house).is_empty());
    let mut tangled = house.clone();
    tangled.insert("f/q.rs".into(), "pub struct Q; fn z() { crate::a::run(); }".into());
    assert_eq!(import_circles(&tangled), ["a → b → f → f::p → f::q"]);
    let mut siblings = house.clone();
    siblings.insert("f/q.rs".into(), "use super::p::go;".into());
    assert_eq!(import_circles(&siblings), ["f::p → f::q"]);
    let wings = sources(&[
        ("lib.rs", "pub mod base; pub mod work;"),
        ("cli.rs", "use crate::work::x::run;"),
        ("work/mod.rs", "pub mod x;"),
        ("work/x.rs", "use crate::base::y::Y;"),
        ("base/mod.rs", "pub mod y;"),
        ("base/y.rs", "pub struct Y;"),
    ]);
    assert!(wing_breaches(&wings).is_empty(), "{:?}", wing_breaches(&wings));
    let mut upward = wings.clone();
    upward.insert("base/y.rs".into(), "pub struct Y; fn z() { crate::work::x::run(); }".into());
    upward.insert("loose.rs".into(), "pub struct L;".into());
    assert_eq!(
        wing_breaches(&upward),
        [
            "base::y (base) imports work::x (work), a wing above it",
            "loose.rs is in no wing: move it into the wing of its noun (server, ops, drive, model, work, people, net, \
             store, sandbox, guard, base)"
        ]
    );
    let mut busy = house.clone();
    busy.insert("server/x.rs".into(), "fn y() { shared.events.publish(&c, e); shared.agents.live(&n); }".into());
    busy.insert("server/layer.rs".into(), "fn z() { shared.agents.live(&n); }".into());
    assert_eq!(turn_work_in_server(&busy).len(), 1);
    let rooms = sources(&[
        ("base/config/mod.rs", "fn load() { std::fs::read_to_string(dir.join(CONFIG_FILE)); }"),
        ("ops/setup.rs", "fn f() { config::text_of(&dir, config::PROVIDERS_FILE); }"),
        ("sandbox/container/docker.rs", "use bollard::Docker;"),
        ("main.rs", "fn main() { std::process::exit(1) }"),
    ]);
    assert!(monopolies_broken(&rooms).is_empty(), "{:?}", monopolies_broken(&rooms));
    let mut broken = rooms;
    broken.insert("ops/setup.rs".into(), "fn f() { std::fs::read_to_string(dir.join(config::CONFIG_FILE)); }".into());
    broken.insert("work/x.rs".into(), "fn g() { std::process::exit(2); bollard::Docker::connect(); }".into());
    assert_eq!(monopolies_broken(&broken).len(), 2);
    let mut leaky = house;
    leaky.insert("b.rs".into(), "fn x() { tokio::spawn(v1::Ack::default()); }".into());
    assert_eq!(wire_outside_server(&leaky).len(), 1);
    assert_eq!(detached_spawns(&leaky).len(), 1);
    // A unit-test module is found however it is marked; a `cfg(test)` item that is not one
    // stays in the code.
    for tests in ["mod tests {", "pub(crate) mod tests {", "pub mod tests {"] {
        let text = format!("fn f() {{}}\n#[cfg(test)]\n#[allow(clippy::x)]\n{tests}\n}}\n");
        assert_eq!(unit_tests_at(&text), Some("fn f() {}\n".len()), "{tests}");
    }
    assert_eq!(unit_tests_at("#[cfg(test)]\nfn helper() {}\n"), None);
}
