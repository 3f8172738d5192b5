//! One control-plane process: spawned as the leader of its own process group with its output
//! in a log file, and killed (the whole group) and reaped when dropped.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How many lines of a component's log an error carries.
pub const LOG_TAIL_LINES: usize = 20;
/// How far back from the end of a log the tail is looked for: a log of any size costs at most
/// this much memory to report.
pub const LOG_TAIL_BYTES: u64 = 16 * 1024;

/// A running component.
#[derive(Debug)]
pub struct Component {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Component {
    /// Starts `program args` with stdout and stderr appended to `log`, in a new process group.
    pub fn spawn(name: &'static str, program: &Path, args: &[String], log: PathBuf) -> std::io::Result<Component> {
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()?;
        Ok(Component { name, log, child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        // The child leads its group (process_group(0)), so its pid is the group id; the group
        // catches anything it started. SIGKILL: the control plane's state is a temporary
        // directory, nothing needs a clean shutdown.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last [`LOG_TAIL_LINES`] lines of the file at `path`, read from at most its last
/// [`LOG_TAIL_BYTES`]; a note instead when it cannot be read.
pub fn log_tail(path: &Path) -> String {
    match read_end(path) {
        Ok(bytes) => last_lines(&String::from_utf8_lossy(&bytes), LOG_TAIL_LINES),
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

fn read_end(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
    let mut buf = Vec::new();
    f.take(LOG_TAIL_BYTES).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The last `n` non-empty lines of `text`, joined by newlines.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn last_lines_keeps_at_most_n_lines_and_they_end_the_text(
            lines in proptest::collection::vec("[a-z ]{0,12}", 0..60),
            n in 0usize..30,
        ) {
            let text = lines.join("\n");
            let tail = last_lines(&text, n);
            let kept: Vec<&str> = if tail.is_empty() { vec![] } else { tail.lines().collect() };
            prop_assert!(kept.len() <= n);
            let non_empty: Vec<&str> = lines.iter().map(String::as_str).filter(|l| !l.trim().is_empty()).collect();
            prop_assert_eq!(&kept[..], &non_empty[non_empty.len() - kept.len()..]);
            prop_assert_eq!(kept.len(), n.min(non_empty.len()));
        }
    }

    #[test]
    fn log_tail_of_a_huge_log_reads_only_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.log");
        let mut text = "x".repeat(10 * 1024 * 1024);
        text.push_str("\nthe last words\n");
        std::fs::write(&path, text).unwrap();
        let tail = log_tail(&path);
        assert!(
            tail.ends_with("the last words"),
            "{}",
            &tail[tail.len().saturating_sub(40)..]
        );
        assert!(tail.len() as u64 <= LOG_TAIL_BYTES, "{}", tail.len());
    }

    #[test]
    fn log_tail_of_a_missing_log_says_it_could_not_be_read() {
        let tail = log_tail(Path::new("/nonexistent/captf-kubetest.log"));
        assert!(
            tail.starts_with("(could not read /nonexistent/captf-kubetest.log"),
            "{tail}"
        );
    }

    #[test]
    fn dropping_a_component_kills_its_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        // A shell that leaves a grandchild behind in its group, then waits.
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let c = Component::spawn(
            "sh",
            Path::new("/bin/sh"),
            &["-c".to_string(), script],
            dir.path().join("sh.log"),
        )
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let grandchild: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the shell never started its grandchild"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let shell = c.pid();
        drop(c);
        assert!(!Path::new(&format!("/proc/{shell}")).exists(), "the shell survived");
        // The grandchild is not ours to reap: it is gone or a zombie waiting for init.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).ok();
            let alive = state.is_some_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
            if !alive {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the grandchild {grandchild} survived its group's kill"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
