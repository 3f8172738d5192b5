//! Running `tofu`/`terraform` as a child: output streamed to the log line by line, a bounded
//! tail kept for error messages, and SIGTERM turned into exactly one SIGINT (docs/runner.md).
//!
//! A second SIGINT makes Terraform exit at once and may leave the state lock held, so the
//! runner forwards the first termination request only and then waits for the child however
//! many more arrive. The child leads its own process group, and the one SIGINT goes to that
//! whole group, as a terminal's Ctrl-C does: Terraform up to 1.0.x runs as two processes (a
//! crash-handling parent and the real Terraform as its child), and the parent ignores a SIGINT
//! sent to its pid alone, so a SIGINT to the pid never reached the process doing the work.
//! Providers are in the group too, and ignore SIGINT as go-plugin servers do. Because the
//! child has its own group, a terminal's Ctrl-C aimed at the runner does not reach it twice.

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

/// Bytes of each stream kept for error messages.
pub const TAIL_BYTES: usize = 8 * 1024;
/// Largest captured stdout (`show -json` of a big plan) accepted.
pub const MAX_CAPTURE_BYTES: usize = 256 * 1024 * 1024;
/// How long to wait for the output pipes to close once the child has exited (a grandchild
/// that inherited them could otherwise keep the runner waiting).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Set to true once a termination request (SIGTERM) arrived.
pub type Interrupt = watch::Receiver<bool>;

/// Where the Job's log goes: stdout in production, a buffer in unit tests. Each call writes
/// one whole line, so lines of stdout and stderr never interleave mid-line.
/// Every line passes through [`crate::redact`] with the run's known secrets.
#[derive(Clone)]
pub struct Log {
    out: Arc<Mutex<dyn Write + Send>>,
    secrets: Arc<Vec<String>>,
}

impl Log {
    pub fn stdout() -> Log {
        Log {
            out: Arc::new(Mutex::new(std::io::stdout())),
            secrets: Arc::new(Vec::new()),
        }
    }

    /// A log that keeps everything in memory, and the buffer to read it back.
    pub fn memory() -> (Log, Arc<Mutex<Vec<u8>>>) {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let log = Log {
            out: Arc::new(Mutex::new(SharedBuf(buf.clone()))),
            secrets: Arc::new(Vec::new()),
        };
        (log, buf)
    }

    /// The values this log masks.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// The same log, masking these values from now on.
    pub fn with_secrets(&self, secrets: Vec<String>) -> Log {
        Log {
            out: self.out.clone(),
            secrets: Arc::new(secrets),
        }
    }

    /// `bytes` as this log writes them: every known secret masked.
    pub fn redacted<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        if self.secrets.is_empty() {
            std::borrow::Cow::Borrowed(bytes)
        } else {
            std::borrow::Cow::Owned(crate::redact::redact_bytes(bytes, &self.secrets))
        }
    }

    /// Write one line (a newline is added when missing). Logging never fails the run.
    pub fn line(&self, bytes: &[u8]) {
        let bytes = self.redacted(bytes);
        let bytes: &[u8] = &bytes;
        if let Ok(mut w) = self.out.lock() {
            let _ = w.write_all(bytes);
            if !bytes.ends_with(b"\n") {
                let _ = w.write_all(b"\n");
            }
            let _ = w.flush();
        }
    }

    /// A line of the runner's own, prefixed so it stands out among Terraform's.
    pub fn note(&self, text: &str) {
        self.line(format!("captf-runner: {text}").as_bytes());
    }
}

struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("log buffer poisoned"))?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The last few KiB of a stream, in whole lines (unless one line alone is longer).
#[derive(Default, Debug)]
struct Tail {
    bytes: VecDeque<u8>,
}

impl Tail {
    fn push(&mut self, line: &[u8]) {
        self.bytes.extend(line);
        if !line.ends_with(b"\n") {
            self.bytes.push_back(b'\n');
        }
        // Drop whole lines from the front; a single line longer than the tail loses its start.
        while self.bytes.len() > TAIL_BYTES {
            match self.bytes.iter().position(|b| *b == b'\n') {
                Some(i) if self.bytes.len() - (i + 1) > 0 => {
                    self.bytes.drain(..=i);
                }
                _ => {
                    let excess = self.bytes.len() - TAIL_BYTES;
                    self.bytes.drain(..excess);
                }
            }
        }
    }

    fn text(&self) -> String {
        let v: Vec<u8> = self.bytes.iter().copied().collect();
        String::from_utf8_lossy(&v).into_owned()
    }
}

/// How to treat the child's stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdout {
    /// Stream it to the log (every Terraform command whose output is for people).
    Stream,
    /// Keep it and never log it (`show -json`, `output -json`: they hold sensitive values).
    Capture,
    /// Stream it to the log, and keep what the log shows (masked) in [`Finished::stdout`], up
    /// to this many bytes of whole lines; [`Finished::cut`] says when more was left out (the
    /// plan a person may have to approve).
    StreamAndKeep(usize),
}

/// A finished child.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// The captured stdout (empty unless [`Stdout::Capture`]).
    pub stdout: Vec<u8>,
    /// The last lines of stderr.
    pub stderr_tail: String,
    /// The last lines of the streamed stdout.
    pub stdout_tail: String,
    /// [`Stdout::StreamAndKeep`] left lines out of `stdout`.
    pub cut: bool,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The signal that killed the child, by name (`SIGKILL`), if it died by one.
    pub fn killed_by(&self) -> Option<String> {
        self.status.signal().map(signal_name)
    }

    /// What the child said last: stderr when it said anything there, else stdout.
    pub fn last_words(&self) -> String {
        let err = self.stderr_tail.trim();
        if err.is_empty() {
            self.stdout_tail.trim().to_string()
        } else {
            err.to_string()
        }
    }

    /// Everything kept of both streams (for matching messages such as force-unlock's).
    pub fn all_text(&self) -> String {
        format!("{}\n{}", self.stdout_tail, self.stderr_tail)
    }
}

/// The JSON document of a captured stdout, and what came before it. OpenTofu 1.12 prints problems of
/// its CLI configuration (a `TF_CLI_CONFIG_FILE` that names a missing file) as a warning on
/// stdout, ahead of the JSON of `show -json` and `output -json`; Terraform 1.0 prints nothing
/// there. The document starts at the first line that opens an object; without one, everything
/// is the document (and fails to parse, naming the parse error).
pub fn json_document(stdout: &[u8]) -> (&[u8], &[u8]) {
    if stdout.first() == Some(&b'{') {
        return (&[], stdout);
    }
    match stdout.windows(2).position(|w| w == b"\n{") {
        Some(p) => stdout.split_at(p + 1),
        None => (&[], stdout),
    }
}

pub fn signal_name(n: i32) -> String {
    Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {n}"))
}

#[derive(Debug, thiserror::Error)]
pub enum TfError {
    #[error("failed to start {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("failed to wait for {command}: {source}")]
    Wait { command: String, source: std::io::Error },
    #[error("failed to read the output of {command}: {source}")]
    ReadOutput { command: String, source: std::io::Error },
    /// A termination request arrived before the command started: it was not run.
    #[error("termination requested before {command} started; it was not run")]
    InterruptedBeforeStart { command: String },
    /// A termination request arrived while the command ran: it got one SIGINT and exited.
    #[error("termination requested during {command}; it got one SIGINT and exited ({status})")]
    Interrupted { command: String, status: String },
}

/// Describe an exit status for messages: `exit code 1` or `signal SIGKILL`.
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by {}", signal_name(s)),
        (None, None) => "unknown status".to_string(),
    }
}

/// Runs Terraform commands in one working directory.
#[derive(Clone)]
pub struct Tf {
    binary: String,
    dir: PathBuf,
    interrupt: Interrupt,
    log: Log,
}

impl Tf {
    pub fn new(binary: impl Into<String>, dir: impl Into<PathBuf>, interrupt: Interrupt, log: Log) -> Tf {
        Tf {
            binary: binary.into(),
            dir: dir.into(),
            interrupt,
            log,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The short program name for messages (`tofu`, not `/usr/local/bin/tofu`).
    pub fn program(&self) -> String {
        Path::new(&self.binary)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.binary.clone())
    }

    /// Has a termination request arrived?
    pub fn interrupted(&self) -> bool {
        *self.interrupt.borrow()
    }

    /// Run one command to completion. Returns [`TfError::Interrupted`] when a termination
    /// request arrived while it ran (whatever its exit status: Terraform exits 1 after an
    /// interrupt, and only the runner knows it was interrupted).
    pub async fn run(&self, args: &[String], stdout_mode: Stdout) -> Result<Finished, TfError> {
        self.run_with_env(args, stdout_mode, &[]).await
    }

    /// [`Tf::run`] with `env` added to the command's environment (never logged).
    pub async fn run_with_env(
        &self,
        args: &[String],
        stdout_mode: Stdout,
        env: &[(String, String)],
    ) -> Result<Finished, TfError> {
        let command = format!("{} {}", self.program(), args.join(" "));
        if self.interrupted() {
            return Err(TfError::InterruptedBeforeStart { command });
        }
        self.log.note(&format!("$ {command}"));
        let mut child = Command::new(&self.binary)
            .args(args)
            .current_dir(&self.dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(|source| TfError::Spawn {
                command: command.clone(),
                source,
            })?;

        let out = child.stdout.take();
        let err = child.stderr.take();
        let log = self.log.clone();
        let out_task = tokio::spawn(async move {
            match out {
                Some(r) => match stdout_mode {
                    Stdout::Stream => stream(r, &log, None).await.map(|t| (Vec::new(), t, false)),
                    Stdout::StreamAndKeep(limit) => {
                        let mut kept = Kept::new(limit);
                        let tail = stream(r, &log, Some(&mut kept)).await;
                        tail.map(|t| (kept.bytes, t, kept.cut))
                    }
                    Stdout::Capture => capture(r).await.map(|v| (v, Tail::default(), false)),
                },
                None => Ok((Vec::new(), Tail::default(), false)),
            }
        });
        let log = self.log.clone();
        let err_task = tokio::spawn(async move {
            match err {
                Some(r) => stream(r, &log, None).await,
                None => Ok(Tail::default()),
            }
        });

        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let mut interrupt = self.interrupt.clone();
        let mut listening = true;
        let status = loop {
            tokio::select! {
                status = child.wait() => {
                    break status.map_err(|source| TfError::Wait { command: command.clone(), source })?;
                }
                changed = interrupt.wait_for(|v| *v), if listening => {
                    listening = false;
                    if changed.is_ok() {
                        // The child leads its group (process_group(0)): its pid is the group id.
                        match pid.map(|p| killpg(Pid::from_raw(p), Signal::SIGINT)) {
                            Some(Ok(())) => self.log.note(&format!(
                                "termination requested: sent one SIGINT to {}'s process group and waiting for it to stop",
                                self.program()
                            )),
                            Some(Err(e)) => self.log.note(&format!("failed to send SIGINT to {}: {e}", self.program())),
                            None => {}
                        }
                    }
                }
            }
        };

        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            let o = out_task.await;
            let e = err_task.await;
            (o, e)
        })
        .await;
        let read_err = |source: std::io::Error| TfError::ReadOutput {
            command: command.clone(),
            source,
        };
        let (stdout, stdout_tail, stderr_tail, cut) = match drained {
            Ok((Ok(o), Ok(e))) => {
                let (captured, out_tail, cut) = o.map_err(read_err)?;
                let err_tail = e.map_err(read_err)?;
                (captured, out_tail.text(), err_tail.text(), cut)
            }
            Ok(_) => return Err(read_err(std::io::Error::other("reader task failed"))),
            Err(_) => {
                return Err(read_err(std::io::Error::other(
                    "output pipes stayed open after the process exited",
                )));
            }
        };

        if self.interrupted() {
            return Err(TfError::Interrupted {
                command,
                status: describe_status(&status),
            });
        }
        Ok(Finished {
            status,
            stdout,
            stderr_tail,
            stdout_tail,
            cut,
        })
    }
}

/// The first whole lines of a stream, masked, up to a limit.
struct Kept {
    bytes: Vec<u8>,
    limit: usize,
    cut: bool,
}

impl Kept {
    fn new(limit: usize) -> Kept {
        Kept {
            bytes: Vec::new(),
            limit,
            cut: false,
        }
    }

    /// Keep a line if it fits whole; once one does not, keep nothing more.
    fn push(&mut self, line: &[u8]) {
        let newline = usize::from(!line.ends_with(b"\n"));
        if self.cut || self.bytes.len() + line.len() + newline > self.limit {
            self.cut = true;
            return;
        }
        self.bytes.extend_from_slice(line);
        if newline == 1 {
            self.bytes.push(b'\n');
        }
    }
}

/// Copy a stream to the log line by line, keeping its tail, and its head in `kept`.
async fn stream(r: impl AsyncRead + Unpin, log: &Log, mut kept: Option<&mut Kept>) -> std::io::Result<Tail> {
    let mut reader = BufReader::new(r);
    let mut tail = Tail::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(tail);
        }
        log.line(&line);
        if let Some(k) = kept.as_deref_mut() {
            k.push(&log.redacted(&line));
        }
        tail.push(&line);
    }
}

/// Keep a stream without logging it.
async fn capture(r: impl AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    let limit = u64::try_from(MAX_CAPTURE_BYTES).unwrap_or(u64::MAX);
    let mut limited = r.take(limit + 1);
    limited.read_to_end(&mut v).await?;
    if v.len() > MAX_CAPTURE_BYTES {
        return Err(std::io::Error::other(format!(
            "output larger than {MAX_CAPTURE_BYTES} bytes"
        )));
    }
    // Drain the rest (if any) so the child never blocks on a full pipe.
    let mut rest = limited.into_inner();
    tokio::io::copy(&mut rest, &mut tokio::io::sink()).await?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["-c".to_string(), script.to_string()]
    }

    fn tf(dir: &Path) -> (Tf, watch::Sender<bool>, Arc<Mutex<Vec<u8>>>) {
        let (tx, rx) = watch::channel(false);
        let (log, buf) = Log::memory();
        (Tf::new("/bin/sh", dir, rx, log), tx, buf)
    }

    /// Wait (at most 5 s) for the file a test child writes once it has started.
    async fn wait_for_marker(marker: &Path) {
        for _ in 0..500 {
            if marker.exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("child never started: {} never appeared", marker.display());
    }

    fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
        String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
    }

    #[test]
    fn json_after_a_cli_configuration_warning_is_found_and_the_warning_kept_apart() {
        let out = b"\nWarning: Unable to open CLI configuration file\n\nThe CLI configuration file at \"/x\" does not exist.\n{\"a\":{\"value\":1}}\n";
        let (before, doc) = json_document(out);
        assert!(String::from_utf8_lossy(before).contains("Unable to open CLI configuration file"));
        assert_eq!(doc, b"{\"a\":{\"value\":1}}\n");
        assert_eq!(json_document(b"{\"b\":2}"), (&b""[..], &b"{\"b\":2}"[..]));
        assert_eq!(json_document(b"no json here"), (&b""[..], &b"no json here"[..]));
    }

    #[tokio::test]
    async fn output_is_streamed_line_by_line_and_the_tail_kept() {
        let d = tempfile::tempdir().unwrap();
        let (t, _tx, buf) = tf(d.path());
        let f = t
            .run(&sh("echo one; echo two >&2; printf 'no newline'"), Stdout::Stream)
            .await
            .unwrap();
        assert_eq!(f.code(), Some(0));
        let log = text(&buf);
        assert!(log.contains("captf-runner: $ sh -c"), "{log}");
        assert!(log.contains("one\n"), "{log}");
        assert!(log.contains("two\n"), "{log}");
        assert!(log.contains("no newline\n"), "{log}");
        assert_eq!(f.stderr_tail, "two\n");
        assert_eq!(f.last_words(), "two");
    }

    #[test]
    fn the_log_masks_known_secrets() {
        let (log, buf) = Log::memory();
        let log = log.with_secrets(vec!["hunter2pw".to_string()]);
        log.line(b"Copying configuration from \"git::https://u:hunter2pw@example.com/m.git\"...");
        log.note("$ tofu init -from-module=git::https://u:hunter2pw@example.com/m.git");
        let t = text(&buf);
        assert!(!t.contains("hunter2pw"), "{t}");
        assert_eq!(t.matches("***").count(), 2);
    }

    #[tokio::test]
    async fn captured_stdout_is_never_logged() {
        let d = tempfile::tempdir().unwrap();
        let (t, _tx, buf) = tf(d.path());
        // The command line does not contain the value; only the output does.
        let f = t
            .run(&sh("printf '{\"s\":\"s3c%st\"}\\n' r3"), Stdout::Capture)
            .await
            .unwrap();
        assert_eq!(f.stdout, b"{\"s\":\"s3cr3t\"}\n");
        assert!(!text(&buf).contains("s3cr3t"));
    }

    #[tokio::test]
    async fn stream_and_keep_keeps_the_first_whole_lines_masked_as_the_log_shows_them() {
        let d = tempfile::tempdir().unwrap();
        let (t, _tx, buf) = tf(d.path());
        let t = Tf::new(
            "/bin/sh",
            d.path(),
            t.interrupt.clone(),
            t.log().with_secrets(vec!["hunter2pw".into()]),
        );
        let f = t
            .run(
                &sh("echo 'pw = hunter2pw'; echo second; echo third"),
                Stdout::StreamAndKeep(20),
            )
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&f.stdout), "pw = ***\nsecond\n");
        assert!(f.cut, "the third line did not fit");
        assert!(text(&buf).contains("third"), "the log still has every line");
        let whole = t
            .run(&sh("echo a; printf b"), Stdout::StreamAndKeep(100))
            .await
            .unwrap();
        assert_eq!((whole.stdout.as_slice(), whole.cut), (&b"a\nb\n"[..], false));
    }

    #[tokio::test]
    async fn the_tail_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let (t, _tx, _buf) = tf(d.path());
        let f = t
            .run(
                &sh("i=0; while [ $i -lt 2000 ]; do echo line-$i >&2; i=$((i+1)); done"),
                Stdout::Stream,
            )
            .await
            .unwrap();
        assert!(f.stderr_tail.len() <= TAIL_BYTES);
        assert!(f.stderr_tail.ends_with("line-1999\n"));
        assert!(f.stderr_tail.starts_with("line-"), "whole lines only");
    }

    #[test]
    fn a_single_line_longer_than_the_tail_keeps_its_end() {
        let mut t = Tail::default();
        t.push(b"first\n");
        t.push(format!("{}END\n", "x".repeat(TAIL_BYTES * 2)).as_bytes());
        let text = t.text();
        assert_eq!(text.len(), TAIL_BYTES);
        assert!(text.ends_with("xEND\n"));
    }

    #[tokio::test]
    async fn a_missing_binary_is_a_spawn_error_naming_the_command() {
        let d = tempfile::tempdir().unwrap();
        let (tx, rx) = watch::channel(false);
        let (log, _) = Log::memory();
        let t = Tf::new("/nonexistent/tofu", d.path(), rx, log);
        let err = t.run(&["init".to_string()], Stdout::Stream).await.unwrap_err();
        assert!(matches!(err, TfError::Spawn { .. }));
        assert!(err.to_string().starts_with("failed to start tofu init: "), "{err}");
        drop(tx);
    }

    #[tokio::test]
    async fn a_child_killed_by_a_signal_is_reported_by_signal_name() {
        let d = tempfile::tempdir().unwrap();
        let (t, _tx, _) = tf(d.path());
        let f = t.run(&sh("kill -KILL $$"), Stdout::Stream).await.unwrap();
        assert_eq!(f.code(), None);
        assert_eq!(f.killed_by().as_deref(), Some("SIGKILL"));
        assert_eq!(describe_status(&f.status), "killed by SIGKILL");
    }

    #[tokio::test]
    async fn a_termination_request_sends_exactly_one_sigint_and_waits() {
        // A process started in the background by a shell without job control inherits SIGINT
        // ignored, and a non-interactive shell cannot trap a signal ignored on entry (POSIX), so
        // the child below would never see the SIGINT. Handling SIGINT here, as the runner binary
        // does (lib.rs), gives children the default disposition whatever launched the tests.
        let _sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let (t, tx, buf) = tf(d.path());
        let marker = d.path().join("started");
        let sigs = d.path().join("sigs");
        // Count SIGINTs; after the first, linger so a second one would be seen, then exit 1.
        let script = format!(
            "n=0; trap 'n=$((n+1)); echo INT >> {sigs}' INT; touch {marker}; \
             while [ $n -eq 0 ]; do sleep 0.02; done; i=0; while [ $i -lt 10 ]; do sleep 0.02; i=$((i+1)); done; \
             echo 'execution halted' >&2; exit 1",
            sigs = sigs.display(),
            marker = marker.display()
        );
        let run = tokio::spawn({
            let t = t.clone();
            async move { t.run(&sh(&script), Stdout::Stream).await }
        });
        wait_for_marker(&marker).await;
        tx.send(true).unwrap();
        // A second request must not produce a second SIGINT.
        tx.send(true).unwrap();
        let err = run.await.unwrap().unwrap_err();
        assert!(matches!(err, TfError::Interrupted { .. }), "{err}");
        assert!(err.to_string().contains("exit code 1"), "{err}");
        assert_eq!(std::fs::read_to_string(&sigs).unwrap(), "INT\n");
        assert!(text(&buf).contains("execution halted"));
    }

    #[tokio::test]
    async fn the_one_sigint_reaches_the_whole_process_group_of_the_child() {
        // Like Terraform up to 1.0.x: a parent that only notes SIGINT and waits for its child
        // (run in the foreground, as Terraform's real process is), and a child that stops on
        // SIGINT. A SIGINT to the parent's pid alone would leave the child running forever.
        let _sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let (t, tx, buf) = tf(d.path());
        let marker = d.path().join("started");
        let sigs = d.path().join("sigs");
        let script = format!(
            "trap 'echo parent >> {sigs}' INT; \
             sh -c \"trap 'echo child >> {sigs}; exit 3' INT; touch {marker}; while :; do sleep 0.02; done\"; \
             echo \"child exited $?\" >&2; exit 1",
            sigs = sigs.display(),
            marker = marker.display()
        );
        let run = tokio::spawn({
            let t = t.clone();
            async move { t.run(&sh(&script), Stdout::Stream).await }
        });
        wait_for_marker(&marker).await;
        tx.send(true).unwrap();
        let err = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("the child never got the SIGINT")
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, TfError::Interrupted { .. }), "{err}");
        let got = std::fs::read_to_string(&sigs).unwrap();
        assert_eq!(got.lines().filter(|l| *l == "child").count(), 1, "{got}");
        assert_eq!(got.lines().filter(|l| *l == "parent").count(), 1, "{got}");
        assert!(text(&buf).contains("child exited 3"));
    }

    #[tokio::test]
    async fn nothing_starts_after_a_termination_request() {
        let d = tempfile::tempdir().unwrap();
        let (t, tx, _) = tf(d.path());
        tx.send(true).unwrap();
        let err = t.run(&sh("touch ran"), Stdout::Stream).await.unwrap_err();
        assert!(matches!(err, TfError::InterruptedBeforeStart { .. }));
        assert!(!d.path().join("ran").exists());
    }
}
