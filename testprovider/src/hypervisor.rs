//! The test world's compute: for every machine record the provider writes
//! (`captftest_machine`, [`crate::world::Machine`]) it boots a "VM", a process on this host that
//! the test chooses (a node agent that joins a cluster from the record's user data), and powers
//! it off when the record goes. The provider cannot start the process itself: it runs inside a
//! runner pod whose processes all end with the pod, and a VM outlives the apply that created it.
//!
//! A VM is booted once per record: one whose process died (a test's [`Hypervisor::crash`], or
//! an agent that gave up) stays down until its record is deleted or rewritten with other user
//! data, as a crashed instance stays down until it is replaced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::world::{Machine, World};

/// How often the world's machine records are looked at.
const POLL: Duration = Duration::from_millis(200);

/// What the boot command of one VM is built from.
pub struct BootRequest<'a> {
    pub machine: &'a Machine,
    /// The record's user data, in a file only the owner may read.
    pub user_data: &'a Path,
    /// The VM's own folder (its "disk"): the agent keeps its keys there.
    pub dir: &'a Path,
}

type Boot = dyn Fn(&BootRequest<'_>) -> Command + Send + Sync;

struct Vm {
    /// The record it was booted from: a rewritten record is another VM.
    booted_from: Machine,
    /// `None` once it was powered off or crashed.
    process: Option<Child>,
}

#[derive(Default)]
struct State {
    vms: BTreeMap<String, Vm>,
    /// Boots that failed (the command could not start), by machine name.
    failures: BTreeMap<String, String>,
}

/// Boots and powers off the world's machines until dropped (which powers off every VM).
pub struct Hypervisor {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Hypervisor {
    /// Watch `world`'s machine records; each VM's folder is `<dir>/<machine>/`, its output in
    /// `agent.log` there. Call inside a Tokio runtime.
    pub fn start(
        world: World,
        dir: impl Into<PathBuf>,
        boot: impl Fn(&BootRequest<'_>) -> Command + Send + Sync + 'static,
    ) -> Hypervisor {
        let dir = dir.into();
        let state = Arc::new(Mutex::new(State::default()));
        let boot: Arc<Boot> = Arc::new(boot);
        let task = tokio::spawn({
            let state = state.clone();
            let dir = dir.clone();
            async move {
                let mut tick = tokio::time::interval(POLL);
                loop {
                    tick.tick().await;
                    let records = world.machines();
                    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                    reconcile(&mut s, &records, &dir, &*boot);
                }
            }
        });
        Hypervisor { state, dir, task }
    }

    /// The machines whose VM is running now.
    pub fn running(&self) -> Vec<String> {
        let mut s = self.lock();
        s.vms
            .iter_mut()
            .filter_map(|(name, vm)| {
                let alive = vm.process.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                alive.then(|| name.clone())
            })
            .collect()
    }

    /// Kill a VM's process as a crash would (SIGKILL), leaving its record: it is not booted
    /// again. False when no such VM runs.
    pub fn crash(&self, name: &str) -> bool {
        let mut s = self.lock();
        match s.vms.get_mut(name).and_then(|vm| vm.process.take()) {
            Some(mut child) => {
                let _ = child.start_kill();
                true
            }
            None => false,
        }
    }

    /// Where a VM's output goes.
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.join(name).join("agent.log")
    }

    /// Why a VM could not be booted, if it could not.
    pub fn boot_failure(&self, name: &str) -> Option<String> {
        self.lock().failures.get(name).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Hypervisor {
    fn drop(&mut self) {
        self.task.abort();
        for vm in self.lock().vms.values_mut() {
            if let Some(mut child) = vm.process.take() {
                let _ = child.start_kill();
            }
        }
    }
}

/// One look: power off the VMs whose record went or changed, boot the records with no VM.
fn reconcile(s: &mut State, records: &[Machine], dir: &Path, boot: &Boot) {
    let wanted: BTreeMap<&str, &Machine> = records.iter().map(|m| (m.name.as_str(), m)).collect();
    s.vms.retain(|name, vm| {
        let keep = wanted.get(name.as_str()).is_some_and(|m| **m == vm.booted_from);
        if !keep && let Some(mut child) = vm.process.take() {
            let _ = child.start_kill();
        }
        keep
    });
    for (name, machine) in wanted {
        if s.vms.contains_key(name) {
            continue;
        }
        match boot_one(machine, dir, boot) {
            Ok(child) => {
                s.failures.remove(name);
                s.vms.insert(
                    name.to_string(),
                    Vm {
                        booted_from: machine.clone(),
                        process: Some(child),
                    },
                );
            }
            Err(e) => {
                s.failures.insert(name.to_string(), e);
            }
        }
    }
}

fn boot_one(machine: &Machine, dir: &Path, boot: &Boot) -> Result<Child, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let vm_dir = dir.join(&machine.name);
    std::fs::create_dir_all(&vm_dir).map_err(|e| format!("failed to create {}: {e}", vm_dir.display()))?;
    let user_data = vm_dir.join("user-data");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&user_data)
        .and_then(|mut f| f.write_all(machine.user_data.as_bytes()))
        .map_err(|e| format!("failed to write {}: {e}", user_data.display()))?;
    let log_path = vm_dir.join("agent.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("failed to open {}: {e}", log_path.display()))?;
    let err = log
        .try_clone()
        .map_err(|e| format!("failed to open {}: {e}", log_path.display()))?;
    let mut cmd = boot(&BootRequest {
        machine,
        user_data: &user_data,
        dir: &vm_dir,
    });
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        .kill_on_drop(true);
    cmd.spawn().map_err(|e| format!("failed to boot {}: {e}", machine.name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::world::machine_provider_id;

    fn machine(name: &str, user_data: &str) -> Machine {
        Machine {
            name: name.into(),
            provider_id: machine_provider_id(name),
            user_data: user_data.into(),
        }
    }

    /// A VM that writes what it was booted from into its folder, then waits to be stopped.
    fn sleeper(r: &BootRequest<'_>) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("cp \"$1\" \"$2/booted\"; echo \"$3\" >> \"$2/boots\"; exec sleep 600")
            .arg("sh")
            .arg(r.user_data)
            .arg(r.dir)
            .arg(&r.machine.provider_id);
        c
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_record_boots_its_vm_once_a_crashed_vm_stays_down_and_a_deleted_record_powers_off() {
        let d = tempfile::tempdir().unwrap();
        let world = World::new(d.path().join("world"));
        let hv = Hypervisor::start(world.clone(), d.path().join("vms"), sleeper);
        let vms = d.path().join("vms");

        world.write_machine(&machine("a", "#cloud-config\nA\n")).unwrap();
        world.write_machine(&machine("b", "#cloud-config\nB\n")).unwrap();
        until("both VMs boot", || hv.running() == ["a", "b"]).await;
        until("a's user data reaches its VM", || {
            std::fs::read_to_string(vms.join("a/booted")).is_ok_and(|t| t == "#cloud-config\nA\n")
        })
        .await;

        // A crash: the record stays, the VM is not booted again.
        assert!(hv.crash("a"));
        until("a is down", || hv.running() == ["b"]).await;
        // Looks after the crash (a later record booted) leave it down, booted once.
        world.write_machine(&machine("c", "C")).unwrap();
        until("c boots", || hv.running() == ["b", "c"]).await;
        world.delete_machine("c").unwrap();
        until("c is powered off", || hv.running() == ["b"]).await;
        let boots = std::fs::read_to_string(vms.join("a/boots")).unwrap();
        assert_eq!(boots.lines().count(), 1, "{boots}");

        // New user data is a new VM.
        world.write_machine(&machine("a", "#cloud-config\nA2\n")).unwrap();
        until("a boots again from its new user data", || {
            hv.running() == ["a", "b"]
                && std::fs::read_to_string(vms.join("a/booted")).is_ok_and(|t| t == "#cloud-config\nA2\n")
        })
        .await;

        // A deleted record powers its VM off.
        world.delete_machine("b").unwrap();
        until("b is powered off", || hv.running() == ["a"]).await;
        assert!(!hv.crash("b"));
    }

    #[tokio::test]
    async fn a_vm_that_cannot_boot_says_why() {
        let d = tempfile::tempdir().unwrap();
        let world = World::new(d.path().join("world"));
        let hv = Hypervisor::start(world.clone(), d.path().join("vms"), |_: &BootRequest<'_>| {
            Command::new("/nonexistent/agent")
        });
        world.write_machine(&machine("a", "x")).unwrap();
        until("the failure is recorded", || hv.boot_failure("a").is_some()).await;
        assert!(hv.boot_failure("a").unwrap().contains("failed to boot a"));
        assert!(hv.running().is_empty());
    }
}
