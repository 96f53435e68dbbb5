//! Running host commands: every call has a deadline, and every failure says what ran.

use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What a finished (or timed-out) command left behind.
#[derive(Debug)]
pub struct Output {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Output {
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }
}

/// A readable name for a command, for error messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` with `stdin` fed to it, killing it after `timeout`. Output is read on threads so
/// a chatty command never blocks on a full pipe.
pub fn run_timeout(cmd: &mut Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Output {
                status: None,
                stdout: String::new(),
                stderr: format!("cannot start `{}`: {e}", describe(cmd)),
                timed_out: false,
            }
        }
    };
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let data = data.to_vec();
        thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    }
}

/// Runs a host command that must succeed (setup steps); returns its stdout.
pub fn must(program: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let o = run_timeout(&mut cmd, None, Duration::from_secs(120));
    if !o.success() {
        panic!(
            "`{}` failed ({:?}, timed out: {}):\n{}{}",
            describe(&cmd),
            o.status,
            o.timed_out,
            o.stdout,
            o.stderr
        );
    }
    o.stdout
}

/// Runs a host command whose failure is only reported (teardown steps).
pub fn best_effort(program: &str, args: &[&str]) {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let o = run_timeout(&mut cmd, None, Duration::from_secs(30));
    if !o.success() {
        eprintln!("teardown: `{}` failed: {}", describe(&cmd), o.stderr.trim());
    }
}

/// Polls `f` every `every` until it returns Ok or `timeout` passes; the error is the last one.
pub fn wait_until<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("still not true after {timeout:?}: {e}"))
            }
            Err(_) => thread::sleep(every),
        }
    }
}

/// Fails loudly when a tool the tier needs is missing (no silent skips).
pub fn require_tools(tools: &[&str]) {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "missing tools for the VM tests: {missing:?} (`make vm-test` installs them)"
    );
}
