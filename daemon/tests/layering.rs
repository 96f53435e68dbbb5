//! The layers of `daemon/src` (docs/ARCHITECTURE.md) point one way: a module uses only the
//! modules of the layers below its own. This test reads every source file, finds each path
//! into another top-level module (`crate::x`, `uplink::x`, or `super::` climbing out of its
//! own module), and fails on any that goes sideways or up. Test code (`tests.rs` files and
//! `#[cfg(test)] mod tests` blocks) may use anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module and its layer: a module may use modules of lower layers only.
const LAYERS: &[(&str, u8)] = &[
    ("config", 0),
    ("logthrottle", 0),
    ("state_file", 0),
    ("fib", 1),
    ("announce", 1),
    ("netconf", 1),
    ("bfd", 2),
    ("l2", 2),
    ("bgp", 3),
    ("kubernetes", 3),
    ("ops", 4),
    ("reload", 4),
    ("control", 5),
    ("daemon", 6),
    ("main", 7),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(name, _)| *name == module).map(|(_, rank)| *rank)
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without its test module (by the repository's convention the inline
/// `#[cfg(test)] mod tests { ... }` block ends the file).
fn production_code(text: &str) -> &str {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let rest = text.get(offset + line.len()..).unwrap_or_default();
        if line.trim() == "#[cfg(test)]" {
            let next = rest.lines().next().unwrap_or_default().trim();
            if next.starts_with("mod ") && next.ends_with('{') {
                return text.get(..offset).unwrap_or_default();
            }
        }
        offset += line.len();
    }
    text
}

/// The module path of a file below `src`: `bgp/rib/mod.rs` → ["bgp", "rib"].
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        relative.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every top-level module a piece of code names, with the line it is on.
fn uses(code: &str, own_path: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or_default();
        for prefix in ["crate::", "uplink::"] {
            for (at, _) in line.match_indices(prefix) {
                // `crate::` inside a longer identifier (`my_crate::`) is not a path root.
                let before = line.get(..at).and_then(|b| b.chars().last());
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let rest = line.get(at + prefix.len()..).unwrap_or_default();
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.push((number + 1, name));
            }
        }
        // `super::super::x` from bgp/rib/loc_rib.rs stays in bgp; one more climbs to the root.
        for (at, _) in line.match_indices("super::") {
            let before = line.get(..at).unwrap_or_default();
            if before.ends_with("super::") {
                continue;
            }
            let mut rest = line.get(at..).unwrap_or_default();
            let mut climbs = 0;
            while let Some(after) = rest.strip_prefix("super::") {
                climbs += 1;
                rest = after;
            }
            if climbs >= own_path.len() {
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.push((number + 1, name));
            }
        }
    }
    found
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 50, "expected the daemon's sources under {}", src.display());

    let mut violations = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap_or(file);
        let path = module_path(relative);
        let Some(own) = path.first().cloned() else { continue };
        if own == "lib" || path.iter().any(|p| p == "tests") {
            continue;
        }
        let own_layer = layer(&own).unwrap_or_else(|| {
            panic!(
                "{}: module `{own}` has no layer; add it to LAYERS and to docs/ARCHITECTURE.md",
                relative.display()
            )
        });
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in uses(production_code(&text), &path) {
            if used == own || used.is_empty() {
                continue;
            }
            let Some(used_layer) = layer(&used) else { continue };
            *edges.entry((own.clone(), used.clone())).or_default() += 1;
            if used_layer >= own_layer {
                violations.push(format!(
                    "{}:{line}: `{own}` (layer {own_layer}) uses `{used}` (layer {used_layer})",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports that point sideways or up (see docs/ARCHITECTURE.md):\n{}",
        violations.join("\n")
    );
    // The wiring at the top must be seen, or the scan is reading nothing.
    assert!(edges.contains_key(&("daemon".to_string(), "bgp".to_string())));
    assert!(edges.contains_key(&("bgp".to_string(), "fib".to_string())));
}

#[test]
fn the_scan_sees_every_kind_of_path() {
    let code = "use crate::bgp::rib;\nlet x = uplink::fib::start();\nuse super::super::config::X;\n// crate::control in a comment\nuse super::sibling;";
    let found = uses(code, &["bgp".into(), "rib".into()]);
    assert_eq!(
        found,
        vec![(1, "bgp".to_string()), (2, "fib".to_string()), (3, "config".to_string())]
    );
    let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::daemon;\n}\n";
    assert_eq!(production_code(text), "fn a() {}\n");
}
