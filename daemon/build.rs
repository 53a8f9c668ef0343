//! Embeds the default agent identities (`config/agents`) and bundled skills (`config/skills`)
//! so the daemon can install them into a new data dir without the source tree.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else {
            out.push(path.strip_prefix(root).map_err(std::io::Error::other)?.to_path_buf());
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../config").canonicalize()?;
    let mut files = vec![];
    for top in ["agents", "skills"] {
        let dir = config.join(top);
        println!("cargo:rerun-if-changed={}", dir.display());
        collect(&config, &dir, &mut files)?;
    }
    let mut code = String::from(
        "/// (path relative to the data dir, contents)\npub(crate) static DEFAULT_FILES: &[(&str, &[u8])] = &[\n",
    );
    for file in &files {
        let relative = file.to_str().ok_or("non-UTF-8 path under config/")?;
        println!("cargo:rerun-if-changed={}", config.join(file).display());
        writeln!(code, "    ({relative:?}, include_bytes!({:?})),", config.join(file).display().to_string())?;
    }
    code.push_str("];\n");
    std::fs::write(PathBuf::from(std::env::var("OUT_DIR")?).join("default_files.rs"), code)?;
    Ok(())
}
