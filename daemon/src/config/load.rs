//! Finding and reading the config files, then parsing, validating and merging them.

use std::path::{Path, PathBuf};

use super::error::{ConfigError, ConfigErrors, Loc};
use super::merge::merge;
use super::model::Config;
use super::raw::RawFile;
use super::source::SourceText;
use super::validate::validate_file;

/// Where the main config file lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/uplink/uplink.toml";

/// The fragment directory's name, next to the main file.
pub const FRAGMENT_DIR: &str = "conf.d";

/// The files that make up the config: `main_path`, then every `*.toml` in the `conf.d/`
/// directory next to it, sorted by file name (byte order, like `ls` in the C locale). Hidden
/// files (leading `.`, e.g. editor swap files) are skipped. A missing `conf.d/` is fine.
pub fn config_files(main_path: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let mut files = vec![main_path.to_path_buf()];
    let dir = main_path.parent().unwrap_or(Path::new(".")).join(FRAGMENT_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(error) => {
            return Err(ConfigErrors(vec![
                Loc::file(&dir).error("", format!("cannot list fragments: {error}"))
            ]))
        }
    };
    let mut fragments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| {
            ConfigErrors(vec![Loc::file(&dir).error("", format!("cannot list fragments: {error}"))])
        })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !name.ends_with(".toml") {
            continue;
        }
        // Follows symlinks, so a fragment may link to a file managed elsewhere.
        if entry.path().is_file() {
            fragments.push(entry.path());
        }
    }
    fragments.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    files.extend(fragments);
    Ok(files)
}

/// Loads `main_path` and its `conf.d/` fragments into one validated config.
///
/// Every problem in every file is reported, not just the first: syntax errors stop only the
/// file they are in (TOML parsing cannot continue past one), validation errors are collected
/// per value, and merge conflicts are checked across the files that parsed.
pub fn load(main_path: &Path) -> Result<Config, ConfigErrors> {
    let files = config_files(main_path)?;
    let mut errors = Vec::new();
    let mut sources = Vec::with_capacity(files.len());
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => sources.push((file, text)),
            Err(error) => {
                errors.push(Loc::file(&file).error("", format!("cannot read config file: {error}")))
            }
        }
    }
    let result = load_sources(&sources);
    match result {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors))
        }
    }
}

/// Loads one file's text; `name` is used in error messages and to resolve `password_file`.
pub fn load_str(name: &str, text: &str) -> Result<Config, ConfigErrors> {
    load_sources(&[(PathBuf::from(name), text.to_string())])
}

/// Loads several files' texts, merged in the given order.
pub fn load_sources(sources: &[(PathBuf, String)]) -> Result<Config, ConfigErrors> {
    let mut errors: Vec<ConfigError> = Vec::new();
    let mut fragments = Vec::with_capacity(sources.len());
    for (path, text) in sources {
        let source = SourceText::new(path, text);
        match toml::from_str::<RawFile>(text) {
            Ok(raw) => fragments.push(validate_file(&source, raw, &mut errors)),
            Err(error) => errors.push(source.toml_error(&error)),
        }
    }
    let check_references = errors.is_empty();
    let config = merge(fragments, check_references, &mut errors);
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}
