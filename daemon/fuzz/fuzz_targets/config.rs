//! Arbitrary UTF-8 text as a TOML config file. Loading must never panic (errors are fine and
//! must render, since `uplink check` prints them); a config that loads must serialise to JSON
//! (what `show --json` and the control socket do with it).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match uplink::config::load_str("fuzz.toml", text) {
        Ok(config) => {
            let json = serde_json::to_string(&config).expect("a loaded config must serialise");
            assert!(!json.is_empty());
        }
        Err(errors) => {
            let _ = errors.to_string();
        }
    }
});
