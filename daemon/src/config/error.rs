//! Config errors that point at a file, line, column and field, and say what would be valid.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One problem in one config file.
///
/// `line` and `column` are 1-based (columns count characters). An error about a whole file
/// (unreadable, missing) has `line == 0` and `column == 0`, and `Display` leaves them out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// Dotted path such as `bgp.routers[0].neighbors[1].hold_time`; empty for file-level errors.
    pub field: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found while loading a config; never empty when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A position in a config file, kept next to validated values so that later checks (merge
/// conflicts, cross-references) can still point at the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loc {
    /// Shared: every value of a load keeps its position, and the API's Services are copied
    /// into each load's merge with theirs.
    pub file: Arc<Path>,
    pub line: usize,
    pub column: usize,
}

impl Loc {
    /// A position that refers to the whole file.
    pub fn file(path: &Path) -> Self {
        Self { file: Arc::from(path), line: 0, column: 0 }
    }

    pub fn error(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line: self.line,
            column: self.column,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_file_line_column_field_message() {
        let error = ConfigError {
            file: "/etc/uplink/uplink.toml".into(),
            line: 7,
            column: 13,
            field: "bgp.routers[0].asn".into(),
            message: "must be 1..=4294967295".into(),
        };
        assert_eq!(
            error.to_string(),
            "/etc/uplink/uplink.toml:7:13: bgp.routers[0].asn: must be 1..=4294967295"
        );
    }

    #[test]
    fn file_level_errors_leave_out_position_and_field() {
        let error =
            Loc::file(Path::new("/etc/uplink/uplink.toml")).error("", "cannot read: not found");
        assert_eq!(error.to_string(), "/etc/uplink/uplink.toml: cannot read: not found");
    }

    #[test]
    fn errors_display_one_per_line() {
        let loc = Loc { file: Arc::from(Path::new("a.toml")), line: 1, column: 2 };
        let errors = ConfigErrors(vec![loc.error("x", "bad"), loc.error("y", "worse")]);
        assert_eq!(errors.to_string(), "a.toml:1:2: x: bad\na.toml:1:2: y: worse");
    }
}
