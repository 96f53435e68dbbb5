//! One config file's text: byte offsets to line/column, and TOML parse errors to `ConfigError`s
//! that name the field they are about.

use std::cell::Cell;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{ConfigError, Loc};

/// A config file's name and text.
pub(crate) struct SourceText<'a> {
    pub path: Arc<Path>,
    pub text: &'a str,
    positions: Positions,
    /// Whether validating it read a key file (see [`Self::read_secret_file`]).
    read_a_file: Cell<bool>,
}

/// How a byte offset of the text becomes a position in the file the operator reads.
enum Positions {
    /// The text is the file: byte offset where each line starts; the first entry is 0.
    Lines(Vec<usize>),
    /// The text was made by uplink from this line of the file (a manifest document translated
    /// into TOML): its offsets mean nothing in the file, so every position is that line,
    /// column 1.
    MadeFrom(usize),
}

impl<'a> SourceText<'a> {
    pub fn new(path: &Path, text: &'a str) -> Self {
        // `match_indices` finds the newlines with `memchr`, not char by char.
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i.saturating_add(1)))
            .collect();
        Self {
            path: Arc::from(path),
            text,
            positions: Positions::Lines(line_starts),
            read_a_file: Cell::new(false),
        }
    }

    /// `text` made from what starts at `line` of `path`: every position in it is reported as
    /// `line`, column 1.
    pub fn made_from(path: &Arc<Path>, line: usize, text: &'a str) -> Self {
        Self {
            path: path.clone(),
            text,
            positions: Positions::MadeFrom(line),
            read_a_file: Cell::new(false),
        }
    }

    /// A key file this source names (`password_file`), read now; noted, so a load that keeps
    /// translations (`manifest/cache.rs`) reads it again next time.
    pub fn read_secret_file(&self, path: &Path) -> Result<String, String> {
        self.read_a_file.set(true);
        super::check::read_secret_file(path)
    }

    /// Whether validating this source read a key file.
    pub fn read_a_file(&self) -> bool {
        self.read_a_file.get()
    }

    /// The 1-based line and column (in characters) of a byte offset.
    pub fn loc(&self, offset: usize) -> Loc {
        let line_starts = match &self.positions {
            Positions::Lines(line_starts) => line_starts,
            Positions::MadeFrom(line) => {
                return Loc { file: self.path.clone(), line: *line, column: 1 }
            }
        };
        let offset = offset.min(self.text.len());
        // partition_point counts line starts at or before `offset`: that count is the line number.
        let line = line_starts.partition_point(|start| *start <= offset).max(1);
        let line_start = line.checked_sub(1).and_then(|i| line_starts.get(i)).copied().unwrap_or(0);
        let column =
            self.text.get(line_start..offset).map_or(0, |s| s.chars().count()).saturating_add(1);
        Loc { file: self.path.clone(), line, column }
    }

    pub fn error_at(
        &self,
        span: &Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        self.loc(span.start).error(field, message)
    }

    /// Where the value at each of `paths` (`a.b[0].c`, as errors name fields) is written, if the
    /// text is TOML that has it; the text is parsed once for all of them. A text made from a
    /// manifest has no positions of its own (every one is the document's line): nothing to find.
    pub fn spans_of(&self, paths: &[String]) -> Vec<Option<Range<usize>>> {
        fn find(value: &Spanned<DeValue<'_>>, here: &str, path: &str) -> Option<Range<usize>> {
            if here == path {
                return Some(value.span());
            }
            if !path.starts_with(here) {
                return None;
            }
            match value.get_ref() {
                DeValue::Table(table) => table.iter().find_map(|(key, value)| {
                    find(value, &format!("{here}.{}", key.get_ref()), path)
                }),
                DeValue::Array(array) => array
                    .iter()
                    .enumerate()
                    .find_map(|(index, value)| find(value, &format!("{here}[{index}]"), path)),
                _ => None,
            }
        }
        if matches!(self.positions, Positions::MadeFrom(_)) || paths.is_empty() {
            return vec![None; paths.len()];
        }
        let (root, _) = DeTable::parse_recoverable(self.text);
        paths
            .iter()
            .map(|path| {
                root.get_ref().iter().find_map(|(key, value)| find(value, key.get_ref(), path))
            })
            .collect()
    }

    /// Converts a TOML syntax or deserialisation error. Serde does not report which field it was
    /// deserialising, so the field path is recovered by finding the innermost key or value in the
    /// document whose span contains the error's span.
    pub fn toml_error(&self, error: &toml::de::Error) -> ConfigError {
        let Some(span) = error.span() else {
            return self.loc(0).error("", error.message());
        };
        // Recoverable parsing still yields the keys around a syntax error (e.g. a duplicate key).
        let (root, _) = DeTable::parse_recoverable(self.text);
        let mut search = FieldSearch { target: span.clone(), containing: None, enclosing: None };
        search.table(root.get_ref(), "");
        let field =
            search.containing.or(search.enclosing).map(|(_, path)| path).unwrap_or_default();
        self.error_at(&span, field, error.message())
    }
}

/// Finds the dotted path an error span belongs to.
struct FieldSearch {
    target: Range<usize>,
    /// The smallest key or value span that contains the target, as (width, path).
    containing: Option<(usize, String)>,
    /// Fallback when the error is not inside any parsed value (e.g. a duplicate key, which the
    /// parser drops): the table holding the closest key or table header before the error, as
    /// (start offset, path).
    enclosing: Option<(usize, String)>,
}

impl FieldSearch {
    /// Tables written as `[[header]]` only span their header, so every child is visited.
    fn table(&mut self, table: &DeTable<'_>, prefix: &str) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            self.consider(&key.span(), &path);
            self.precedes(key.span().start, prefix);
            self.value(value, &path);
        }
    }

    fn value(&mut self, value: &Spanned<DeValue<'_>>, path: &str) {
        self.consider(&value.span(), path);
        match value.get_ref() {
            DeValue::Table(table) => {
                self.precedes(value.span().start, path);
                self.table(table, path);
            }
            DeValue::Array(array) => {
                for (index, element) in array.iter().enumerate() {
                    self.value(element, &format!("{path}[{index}]"));
                }
            }
            _ => {}
        }
    }

    fn consider(&mut self, span: &Range<usize>, path: &str) {
        if span.start <= self.target.start && self.target.end <= span.end {
            let width = span.end.saturating_sub(span.start);
            // `<=` so that among equal spans the deeper (later visited) path wins.
            if self.containing.as_ref().is_none_or(|(best, _)| width <= *best) {
                self.containing = Some((width, path.to_string()));
            }
        }
    }

    fn precedes(&mut self, start: usize, table_path: &str) {
        if start < self.target.start
            && self.enclosing.as_ref().is_none_or(|(best, _)| start >= *best)
        {
            self.enclosing = Some((start, table_path.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_one_based_line_and_character_column() {
        let source = SourceText::new(Path::new("f.toml"), "ab\ncdé\nx");
        let at = |offset| {
            let loc = source.loc(offset);
            (loc.line, loc.column)
        };
        assert_eq!(at(0), (1, 1));
        assert_eq!(at(2), (1, 3));
        assert_eq!(at(3), (2, 1));
        // 'é' is two bytes; the 'x' line starts at byte 8.
        assert_eq!(at(8), (3, 1));
        assert_eq!(at(7), (2, 4));
        assert_eq!(at(1000), (3, 2));
    }

    #[test]
    fn toml_errors_name_the_innermost_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Doc {
            items: Vec<Item>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Item {
            n: u8,
        }
        let text = "[[items]]\nn = 1\n\n[[items]]\nn = 300\n";
        let source = SourceText::new(Path::new("f.toml"), text);
        let error = source.toml_error(&toml::from_str::<Doc>(text).unwrap_err());
        assert_eq!((error.line, error.column, error.field.as_str()), (5, 5, "items[1].n"));
        assert!(error.message.contains("expected u8"), "{}", error.message);

        let text = "[[items]]\nn = 1\nm = 2\n";
        let source = SourceText::new(Path::new("f.toml"), text);
        let error = source.toml_error(&toml::from_str::<Doc>(text).unwrap_err());
        assert_eq!((error.line, error.column, error.field.as_str()), (3, 1, "items[0].m"));
        assert!(error.message.contains("expected `n`"), "{}", error.message);
    }
}
