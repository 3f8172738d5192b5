//! The "world" the test provider manages: a directory with one JSON file per thing,
//! `<world>/<name>.json` = `{"name": …, "content": …}`. A test creates drift by editing or
//! deleting a file behind Terraform's back, and checks what an apply or destroy did by reading
//! the files.

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
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| WorldError::Parse { path, source }),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(WorldError::Read { path, source }),
        }
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
}
