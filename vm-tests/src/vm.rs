//! One QEMU VM (TCG): kernel + initramfs, a config drive, a management NIC on QEMU user
//! networking with SSH forwarded to the test namespace's loopback, data NICs on taps, the serial
//! console in a file, and the QEMU monitor on a Unix socket (for power-off).

use crate::cmd::{describe, run_timeout, wait_until, Output};
use crate::net::Netns;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct DataNic {
    pub mac: String,
    pub tap: String,
}

pub struct VmSpec {
    pub name: String,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub append: String,
    pub config_drive: PathBuf,
    pub mem_mib: u32,
    pub cpus: u32,
    pub ssh_port: u16,
    pub mgmt_mac: String,
    pub data: Vec<DataNic>,
}

pub struct Vm {
    pub name: String,
    child: Option<Child>,
    pub console: PathBuf,
    qemu_log: PathBuf,
    monitor: PathBuf,
    control: PathBuf,
    key: PathBuf,
    ssh_port: u16,
    netns: String,
    pub started: Instant,
}

/// How long one SSH command may take; TCG makes even `true` slow on a loaded box.
pub const SSH_TIMEOUT: Duration = Duration::from_secs(60);

impl Vm {
    /// Starts QEMU inside `netns`. Called from the test's own thread: QEMU gets
    /// PR_SET_PDEATHSIG, so it dies with that thread even if the test process is SIGKILLed
    /// and no Drop runs.
    pub fn start(spec: &VmSpec, netns: &Netns, run_dir: &Path, log_dir: &Path, key: &Path) -> Vm {
        let console = log_dir.join(format!("{}.console.log", spec.name));
        let monitor = run_dir.join(format!("{}.mon", spec.name));
        let control = run_dir.join(format!("{}.ssh", spec.name));
        let _ = std::fs::remove_file(&console);
        let mut cmd = netns.command("qemu-system-x86_64");
        cmd.args(["-name", &spec.name, "-accel", "tcg", "-machine", "pc"])
            .args(["-smp", &spec.cpus.to_string()])
            .args(["-m", &spec.mem_mib.to_string()])
            // No -no-reboot: a reboot in the guest boots the same kernel, initramfs and config
            // drive again, as a PXE-booted node does (the reboot scenario).
            .args(["-nodefaults", "-no-user-config", "-display", "none"])
            .arg("-kernel")
            .arg(&spec.kernel)
            .arg("-initrd")
            .arg(&spec.initrd)
            .args(["-append", &spec.append])
            .args(["-chardev", &format!("file,id=ser0,path={}", console.display())])
            .args(["-serial", "chardev:ser0"])
            .args(["-monitor", &format!("unix:{},server=on,wait=off", monitor.display())])
            .args(["-drive", &format!("file={},format=raw,if=virtio", spec.config_drive.display())])
            // Entropy for sshd and the kernel's CRNG: without it a TCG guest can stall at boot.
            .args(["-device", "virtio-rng-pci"])
            .args(["-netdev", &format!("user,id=mgmt,hostfwd=tcp:127.0.0.1:{}-:22", spec.ssh_port)])
            .args(["-device", &format!("virtio-net-pci,netdev=mgmt,mac={}", spec.mgmt_mac)]);
        for (i, nic) in spec.data.iter().enumerate() {
            cmd.args([
                "-netdev",
                &format!("tap,id=d{i},ifname={},script=no,downscript=no", nic.tap),
            ])
            .args(["-device", &format!("virtio-net-pci,netdev=d{i},mac={}", nic.mac)]);
        }
        let qemu_log = log_dir.join(format!("{}.qemu.log", spec.name));
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(
            std::fs::File::create(&qemu_log).map(Stdio::from).unwrap_or_else(|_| Stdio::null()),
        );
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let what = describe(&cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
        Vm {
            name: spec.name.clone(),
            child: Some(child),
            console,
            qemu_log,
            monitor,
            control,
            key: key.to_owned(),
            ssh_port: spec.ssh_port,
            netns: netns.name.clone(),
            started: Instant::now(),
        }
    }

    /// Whether QEMU still runs; Err carries how it ended.
    pub fn alive(&mut self) -> Result<(), String> {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(status))) => Err(format!(
                "QEMU of {} exited: {status}: {}",
                self.name,
                std::fs::read_to_string(&self.qemu_log).unwrap_or_default().trim()
            )),
            Some(Err(e)) => Err(format!("QEMU of {}: {e}", self.name)),
            None => Err(format!("{} is powered off", self.name)),
        }
    }

    fn ssh_command(&self, master: bool) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, "ssh"])
            .arg("-i")
            .arg(&self.key)
            .args(["-p", &self.ssh_port.to_string()])
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .args(["-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=5"])
            .args(["-o", "ServerAliveCountMax=6", "-o", "IdentitiesOnly=yes"])
            .arg("-o")
            .arg(format!("ControlPath={}", self.control.display()))
            .args(["-o", if master { "ControlMaster=yes" } else { "ControlMaster=no" }]);
        c
    }

    /// Waits until SSH answers (and leaves a control master behind so later commands skip the
    /// handshake, which costs seconds under TCG). On timeout the error has the console tail.
    pub fn wait_ssh(&mut self, timeout: Duration) -> Result<Duration, String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.alive().map_err(|e| format!("{e}\n{}", self.console_tail(60)))?;
            let (ok, err) = self.start_master();
            if ok {
                return Ok(self.started.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: no SSH after {timeout:?} (last: {}){}",
                    self.name,
                    err.trim(),
                    self.console_tail(60)
                ));
            }
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    /// Starts the SSH control master. It forks into the background after authentication and
    /// may keep inherited descriptors open, so its output goes to a file, never to a pipe.
    fn start_master(&self) -> (bool, String) {
        let log = self.control.with_extension("master.log");
        let Ok(file) = std::fs::File::create(&log) else {
            return (false, format!("cannot create {}", log.display()));
        };
        let mut c = self.ssh_command(true);
        c.args(["-o", "ControlPersist=yes", "-f", "-N", "root@127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        let ok = match c.spawn() {
            Ok(mut child) => {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    match child.try_wait() {
                        Ok(Some(s)) => break s.success(),
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break false;
                        }
                    }
                }
            }
            Err(_) => false,
        };
        (ok, std::fs::read_to_string(&log).unwrap_or_default())
    }

    /// Ends the SSH control master and removes its socket: after a reboot the old master's
    /// connection is dead, and commands must not wait on it.
    pub fn forget_master(&self) {
        let mut c = self.ssh_command(false);
        c.args(["-O", "exit", "root@127.0.0.1"]);
        let _ = run_timeout(&mut c, None, Duration::from_secs(5));
        let _ = std::fs::remove_file(&self.control);
    }

    /// What another SSH client (scp, Ansible) needs to reach the VM through this VM's control
    /// master: the forwarded port on the namespace's loopback, the key, the control socket.
    pub fn ssh_endpoint(&self) -> (u16, &Path, &Path) {
        (self.ssh_port, &self.key, &self.control)
    }

    /// Runs a shell script on the VM as root.
    pub fn ssh(&self, script: &str) -> Output {
        self.ssh_for(script, SSH_TIMEOUT)
    }

    /// Runs a shell script on the VM as root, for at most `timeout`: longer than the bounds of
    /// the commands in it (`uplink wait-ready --timeout`, `uplink reload`).
    pub fn ssh_for(&self, script: &str, timeout: Duration) -> Output {
        let mut c = self.ssh_command(false);
        c.args(["root@127.0.0.1", "sh", "-s"]);
        run_timeout(&mut c, Some(script.as_bytes()), timeout)
    }

    /// Runs a script that must succeed; the error carries its output and the console tail.
    pub fn sh(&self, script: &str) -> Result<String, String> {
        self.sh_for(script, SSH_TIMEOUT)
    }

    /// [`Vm::sh`] with a bound of its own (see [`Vm::ssh_for`]).
    pub fn sh_for(&self, script: &str, timeout: Duration) -> Result<String, String> {
        let o = self.ssh_for(script, timeout);
        if o.success() {
            Ok(o.stdout)
        } else {
            Err(format!(
                "on {}: `{}` failed ({:?}{}):\nstdout: {}\nstderr: {}{}",
                self.name,
                script.trim(),
                o.status,
                if o.timed_out { format!(", timed out after {timeout:?}") } else { String::new() },
                o.stdout.trim(),
                o.stderr.trim(),
                self.console_tail(30)
            ))
        }
    }

    /// The serial console so far, printable characters only (empty before the VM wrote any).
    pub fn console_text(&self) -> String {
        let raw = std::fs::read(&self.console).unwrap_or_default();
        String::from_utf8_lossy(&raw).chars().filter(|c| *c == '\n' || !c.is_control()).collect()
    }

    /// The last `lines` of the serial console, printable characters only.
    pub fn console_tail(&self, lines: usize) -> String {
        let text = self.console_text();
        let all: Vec<&str> = text.lines().collect();
        let tail = all.get(all.len().saturating_sub(lines)..).unwrap_or(&[]);
        format!(
            "\n--- {} console, last {} lines ---\n{}\n---",
            self.name,
            tail.len(),
            tail.join("\n")
        )
    }

    /// Pulls the plug: the monitor's `quit` stops the VM at once, no shutdown, like a power cut.
    pub fn power_off(&mut self) -> Result<Instant, String> {
        let mut s = UnixStream::connect(&self.monitor)
            .map_err(|e| format!("monitor of {}: {e}", self.name))?;
        s.write_all(b"quit\n").map_err(|e| format!("monitor of {}: {e}", self.name))?;
        let at = Instant::now();
        let child = self.child.as_mut().ok_or("already off")?;
        wait_until(Duration::from_secs(10), Duration::from_millis(10), || match child.try_wait() {
            Ok(Some(_)) => Ok(()),
            _ => Err("QEMU still running".into()),
        })
        .or_else(|_| child.kill().map_err(|e| e.to_string()))?;
        let _ = child.wait();
        self.child = None;
        Ok(at)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The control master exits when its connection drops; make sure it does.
        let mut c = self.ssh_command(false);
        c.args(["-O", "exit", "root@127.0.0.1"]);
        let _ = run_timeout(&mut c, None, Duration::from_secs(5));
    }
}
