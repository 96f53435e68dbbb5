//! Enactments on disk: `<state_dir>/enactments.json`, rewritten whole after every transition
//! (written to a temporary file, then renamed over the old one, so a crash leaves either the
//! old or the new file and never half of one).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::enactment::Enactment;

const FILE_NAME: &str = "enactments.json";

/// The enactments of one node, by policy name.
#[derive(Debug)]
pub struct EnactmentStore {
    path: PathBuf,
    pub enactments: BTreeMap<String, Enactment>,
}

impl EnactmentStore {
    /// Reads the store in `state_dir`; a missing file is an empty store.
    pub fn open(state_dir: &Path) -> Result<Self, String> {
        let path = state_dir.join(FILE_NAME);
        let enactments = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{}: not a valid enactments file: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Self { path, enactments })
    }

    /// An empty store that will write to `state_dir` (after a file that could not be read).
    pub fn empty(state_dir: &Path) -> Self {
        Self { path: state_dir.join(FILE_NAME), enactments: BTreeMap::new() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `enactment` and writes the store.
    pub fn put(&mut self, enactment: Enactment) -> Result<(), String> {
        self.enactments.insert(enactment.policy.clone(), enactment);
        self.save()
    }

    pub fn save(&self) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let text = serde_json::to_string_pretty(&self.enactments)
            .map_err(|e| format!("cannot encode enactments: {e}"))?;
        let temporary = self.path.with_extension("json.new");
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)
        };
        write().map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::enactment::EnactmentStatus;
    use super::*;

    #[test]
    fn a_store_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("uplink");
        let mut store = EnactmentStore::open(&state_dir).unwrap();
        assert!(store.enactments.is_empty());
        let mut e = Enactment::new("bridge", serde_json::json!({"interfaces": []}), 5);
        e.transition(EnactmentStatus::Failing, "probe dns failed", 6);
        store.put(e.clone()).unwrap();
        let again = EnactmentStore::open(&state_dir).unwrap();
        assert_eq!(again.enactments.get("bridge"), Some(&e));
        assert!(!state_dir.join("enactments.json.new").exists());

        std::fs::write(state_dir.join("enactments.json"), "{ not json").unwrap();
        let error = EnactmentStore::open(&state_dir).unwrap_err();
        assert!(error.contains("not a valid enactments file"), "{error}");
    }
}
