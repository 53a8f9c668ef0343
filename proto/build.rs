//! Compiles `proto/baaaht/v1/*.proto` with protox (a pure-Rust protobuf compiler), so building
//! needs no `protoc` from outside the crate registry.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/baaaht/v1/common.proto",
        "proto/baaaht/v1/llm.proto",
        "proto/baaaht/v1/health.proto",
        "proto/baaaht/v1/types.proto",
        "proto/baaaht/v1/agents.proto",
        "proto/baaaht/v1/sessions.proto",
        "proto/baaaht/v1/skills.proto",
        "proto/baaaht/v1/memory.proto",
        "proto/baaaht/v1/tasks.proto",
        "proto/baaaht/v1/system.proto",
        "proto/baaaht/v1/gateways.proto",
        "proto/baaaht/v1/admin.proto",
        "proto/baaaht/v1/speech.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
