//! Arbitrary text as a config directory: the main `uplink.toml` and up to four `conf.d/`
//! files, TOML or Kubernetes manifests (frr-k8s, MetalLB, RouteAdvertisements,
//! NodeNetworkConfigurationPolicy ...), loaded and merged by `config::load_sources`, which is
//! what `config::load` runs on the files it read.
//!
//! Input: the main file's text, then for each further file a line `#> NAME` (a comment in both
//! TOML and YAML, so seeds stay valid files) followed by its text. Names are taken as
//! `config_files` would list them: only fragments (`is_fragment_name`), sorted by name.
//!
//! Besides "never panics": every error names one of the files it was given and a line inside
//! that file (0 for the whole file), and renders; a config that loads serialises to JSON; and
//! the translations a reload keeps (`config::ManifestCache`), made from all files but the last,
//! give what a fresh load gives once the last file is there.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

/// Files beyond this are ignored: the merge rules are pairwise, a few files reach them all.
const MAX_FRAGMENTS: usize = 4;
/// A directory that does not exist, so a relative `password_file` finds nothing.
const DIR: &str = "/nonexistent/uplink-fuzz";

fuzz_target!(|text: &str| {
    let mut parts = text.split("\n#> ");
    let main = parts.next().unwrap_or_default();
    let mut fragments: Vec<(String, String)> = Vec::new();
    for part in parts.take(MAX_FRAGMENTS) {
        let (name, body) = part.split_once('\n').unwrap_or((part, ""));
        let name = name.trim();
        let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !plain || !uplink::config::is_fragment_name(name) {
            continue;
        }
        if fragments.iter().any(|(n, _)| n == name) {
            continue; // One directory holds one file of a name.
        }
        fragments.push((name.to_string(), body.to_string()));
    }
    fragments.sort_by(|a, b| a.0.cmp(&b.0));

    let mut sources = vec![(PathBuf::from(DIR).join("uplink.toml"), main.to_string())];
    let conf_d = PathBuf::from(DIR).join(uplink::config::FRAGMENT_DIR);
    sources.extend(fragments.into_iter().map(|(name, body)| (conf_d.join(name), body)));

    let fresh = uplink::config::load_sources(&sources);
    let mut cache = uplink::config::ManifestCache::default();
    let shared: Vec<uplink::config::Source> =
        sources.iter().map(|(path, text)| (path.as_path().into(), text.as_str().into())).collect();
    let all: Vec<&uplink::config::Source> = shared.iter().collect();
    let before = all.get(..all.len().saturating_sub(1).max(1)).unwrap_or(&all);
    let _ = uplink::config::load_sources_kept(before, &mut cache);
    match (&fresh, uplink::config::load_sources_kept(&all, &mut cache)) {
        (Ok(fresh), Ok(kept)) => assert_eq!(*fresh, kept, "the kept translations differ"),
        (Err(fresh), Err(kept)) => {
            assert_eq!(fresh.to_string(), kept.to_string(), "the kept translations differ")
        }
        (fresh, kept) => panic!("the kept translations differ: {fresh:?} / {kept:?}"),
    }

    match fresh {
        Ok(config) => {
            let json = serde_json::to_string(&config).expect("a loaded config must serialise");
            assert!(!json.is_empty());
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "an error result without errors");
            for error in &errors.0 {
                let Some((_, text)) = sources.iter().find(|(path, _)| *path == error.file) else {
                    panic!("error names no given file: {error}");
                };
                // A file's last line may end without a newline; an error at the end of the
                // text points one line past it.
                let lines = text.lines().count() + 1;
                assert!(
                    error.line <= lines,
                    "line {} past the end of the file ({lines} lines): {error}",
                    error.line
                );
            }
            assert!(!errors.to_string().is_empty());
        }
    }
});
