//! The "world" the test provider manages: a directory with one JSON file per thing,
//! `<world>/<name>.json` = `{"name": …, "content": …}`. A test creates drift by editing or
//! deleting a file behind Terraform's back, and checks what an apply or destroy did by reading
//! the files. Machines ("VMs") are records of their own, `<world>/machines/<name>.json`, that a
//! test's [`crate::hypervisor`] boots.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment variable that names the world directory.
pub const WORLD_ENV: &str = "CAPTFTEST_WORLD";
/// When set, every create, update and delete first writes `<world>/<name>.busy` and then waits
/// until the file this variable names exists: a test can hold an apply in the middle of its
/// change for as long as it needs (to kill or interrupt the runner there), up to 10 minutes,
/// after which the change fails naming the file it waited for.
pub const HOLD_ENV: &str = "CAPTFTEST_HOLD";

/// One thing as the world holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thing {
    pub name: String,
    pub content: String,
}

#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("{WORLD_ENV} is not set: the test provider needs a world directory")]
    NoWorld,
    #[error("thing name {0:?} must be 1-63 characters of [a-z0-9-]")]
    BadName(String),
    #[error("failed to read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("failed to parse {path}: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("failed to write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// The names a file name can be built from: no path separators, no dots.
pub fn check_name(name: &str) -> Result<(), WorldError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WorldError::BadName(name.to_string()))
    }
}

/// A world directory.
#[derive(Clone, Debug)]
pub struct World {
    dir: PathBuf,
}

impl World {
    pub fn new(dir: impl Into<PathBuf>) -> World {
        World { dir: dir.into() }
    }

    /// The world named by [`WORLD_ENV`].
    pub fn from_env() -> Result<World, WorldError> {
        match std::env::var_os(WORLD_ENV) {
            Some(dir) if !dir.is_empty() => Ok(World::new(dir)),
            _ => Err(WorldError::NoWorld),
        }
    }

    fn path(&self, name: &str) -> Result<PathBuf, WorldError> {
        check_name(name)?;
        Ok(self.dir.join(format!("{name}.json")))
    }

    /// The marker written while a change of `name` is held.
    pub fn busy_marker(&self, name: &str) -> Result<PathBuf, WorldError> {
        check_name(name)?;
        Ok(self.dir.join(format!("{name}.busy")))
    }

    /// The thing, or None when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Thing>, WorldError> {
        let path = self.path(name)?;
        read_json(&path)
    }

    /// Create or replace the thing (written to a temporary file, then renamed into place).
    pub fn write(&self, thing: &Thing) -> Result<(), WorldError> {
        let path = self.path(&thing.name)?;
        fs::create_dir_all(&self.dir).map_err(|source| WorldError::Write {
            path: self.dir.clone(),
            source,
        })?;
        let tmp = self.dir.join(format!(".{}.json.tmp", thing.name));
        let body = serde_json::to_vec_pretty(thing).map_err(|e| WorldError::Write {
            path: tmp.clone(),
            source: std::io::Error::other(e),
        })?;
        fs::write(&tmp, body).map_err(|source| WorldError::Write {
            path: tmp.clone(),
            source,
        })?;
        fs::rename(&tmp, &path).map_err(|source| WorldError::Write { path, source })
    }

    /// Delete the thing; deleting one that does not exist is not an error.
    pub fn delete(&self, name: &str) -> Result<(), WorldError> {
        let path = self.path(name)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(source) => Err(WorldError::Write { path, source }),
        }
    }
}

/// One machine ("VM") as the world holds it: `<world>/machines/<name>.json`. The test's
/// [`crate::hypervisor`] boots a node agent for each record from its user data, and stops it
/// when the record goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    pub name: String,
    /// What a cloud gives the instance: `captftest:///machine-<name>`.
    pub provider_id: String,
    /// What the module passed as the instance's user data (Cluster API's bootstrap data).
    pub user_data: String,
}

/// The provider ID a machine named `name` gets.
pub fn machine_provider_id(name: &str) -> String {
    format!("captftest:///machine-{name}")
}

impl World {
    /// The folder of the machine records.
    pub fn machines_dir(&self) -> PathBuf {
        self.dir.join("machines")
    }

    fn machine_path(&self, name: &str) -> Result<PathBuf, WorldError> {
        check_name(name)?;
        Ok(self.machines_dir().join(format!("{name}.json")))
    }

    /// The machine, or None when it does not exist.
    pub fn read_machine(&self, name: &str) -> Result<Option<Machine>, WorldError> {
        let path = self.machine_path(name)?;
        read_json(&path)
    }

    /// Create the machine record (owner-only: it holds the user data), written to a temporary
    /// file and renamed into place so that a reader never sees half of it.
    pub fn write_machine(&self, machine: &Machine) -> Result<(), WorldError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.machine_path(&machine.name)?;
        let dir = self.machines_dir();
        fs::create_dir_all(&dir).map_err(|source| WorldError::Write {
            path: dir.clone(),
            source,
        })?;
        let tmp = dir.join(format!(".{}.json.tmp", machine.name));
        let body = serde_json::to_vec_pretty(machine).map_err(|e| WorldError::Write {
            path: tmp.clone(),
            source: std::io::Error::other(e),
        })?;
        let written = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&body));
        written.map_err(|source| WorldError::Write {
            path: tmp.clone(),
            source,
        })?;
        fs::rename(&tmp, &path).map_err(|source| WorldError::Write { path, source })
    }

    /// Delete the machine record; deleting one that does not exist is not an error.
    pub fn delete_machine(&self, name: &str) -> Result<(), WorldError> {
        let path = self.machine_path(name)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(source) => Err(WorldError::Write { path, source }),
        }
    }

    /// Every machine record, by name; a record that cannot be read is left out (it is being
    /// written, or is not one).
    pub fn machines(&self) -> Vec<Machine> {
        let Ok(entries) = fs::read_dir(self.machines_dir()) else {
            return Vec::new();
        };
        let mut found: Vec<Machine> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_suffix(".json")?.to_string();
                self.read_machine(&name).ok().flatten()
            })
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<Option<T>, WorldError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| WorldError::Parse {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(WorldError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_written_thing_reads_back_and_a_deleted_one_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let w = World::new(d.path());
        let t = Thing {
            name: "a".into(),
            content: "one".into(),
        };
        assert_eq!(w.read("a").unwrap(), None);
        w.write(&t).unwrap();
        assert_eq!(w.read("a").unwrap(), Some(t));
        w.delete("a").unwrap();
        assert_eq!(w.read("a").unwrap(), None);
        w.delete("a").unwrap();
    }

    #[test]
    fn names_that_could_escape_the_world_directory_are_refused() {
        let w = World::new("/nonexistent");
        for bad in ["", "../x", "a/b", "A", "a.b", &"x".repeat(64)] {
            assert!(matches!(w.read(bad), Err(WorldError::BadName(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_corrupt_thing_file_is_a_parse_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("a.json"), "{").unwrap();
        let err = World::new(d.path()).read("a").unwrap_err().to_string();
        assert!(err.contains("a.json"), "{err}");
    }

    #[test]
    fn a_machine_record_reads_back_owner_only_and_is_listed_until_deleted() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let w = World::new(d.path());
        let m = Machine {
            name: "m-1".into(),
            provider_id: machine_provider_id("m-1"),
            user_data: "#cloud-config\n".into(),
        };
        assert_eq!(w.machines(), vec![]);
        w.write_machine(&m).unwrap();
        assert_eq!(w.read_machine("m-1").unwrap(), Some(m.clone()));
        assert_eq!(w.machines(), vec![m]);
        let mode = fs::metadata(w.machines_dir().join("m-1.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A thing of the same name is another file.
        assert_eq!(w.read("m-1").unwrap(), None);
        w.delete_machine("m-1").unwrap();
        assert_eq!(w.machines(), vec![]);
        w.delete_machine("m-1").unwrap();
        assert!(matches!(w.read_machine("../x"), Err(WorldError::BadName(_))));
    }
}
