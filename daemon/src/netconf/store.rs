//! Enactments on disk: `<state_dir>/enactments.json`, rewritten whole after every transition
//! (`state_file::write`: a temporary file renamed over the old one, file and directory synced,
//! so a crash leaves either the old or the new file and never half of one).
//!
//! The file is the node's memory of which policies failed: a policy that once cut the node off
//! is Failing there and is not run again until it changes. So a file that cannot be read (a
//! bad write, a downgrade to a release that does not know its format) is never silently
//! replaced by an empty store: [`EnactmentStore::recover`] keeps it aside under a name of its
//! own, and the apply runs no policy on that start (docs/network.md).

use std::collections::BTreeMap;
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

    /// An empty store that will write to `state_dir` (for readers that only show it).
    pub fn empty(state_dir: &Path) -> Self {
        Self { path: state_dir.join(FILE_NAME), enactments: BTreeMap::new() }
    }

    /// After [`Self::open`] failed with `error`: moves the unreadable file aside to
    /// `enactments.json.unreadable-<unix seconds>` (kept for the operator, never overwritten)
    /// and starts an empty store. Returns the store and what to tell the operator.
    pub fn recover(state_dir: &Path, error: &str, now: u64) -> (Self, String) {
        let store = Self::empty(state_dir);
        let mut aside = store.path.as_os_str().to_os_string();
        aside.push(format!(".unreadable-{now}"));
        let aside = PathBuf::from(aside);
        let note = match std::fs::rename(&store.path, &aside)
            .and_then(|()| crate::state_file::sync_dir(&aside))
        {
            Ok(()) => format!("{error}; kept as {}", aside.display()),
            Err(e) => format!("{error}; could not keep it aside as {}: {e}", aside.display()),
        };
        (store, note)
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
        let mut text = serde_json::to_string_pretty(&self.enactments)
            .map_err(|e| format!("cannot encode enactments: {e}"))?;
        text.push('\n');
        crate::state_file::write(&self.path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
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

        // Kept aside, never overwritten by the next save.
        let (mut store, note) = EnactmentStore::recover(&state_dir, &error, 42);
        let aside = state_dir.join("enactments.json.unreadable-42");
        assert!(note.contains("kept as") && note.contains("unreadable-42"), "{note}");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "{ not json");
        assert!(store.enactments.is_empty());
        store.put(e).unwrap();
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "{ not json");
        assert_eq!(EnactmentStore::open(&state_dir).unwrap().enactments.len(), 1);
    }
}
