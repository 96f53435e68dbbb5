//! The writer's rtnetlink socket: many requests per `sendmsg`, ACKs matched to requests by
//! sequence number, and dumps. Blocking; it lives on the FIB writer's own thread (model: FRR
//! `zebra/kernel_netlink.c` batching).

use super::msg::{self, Message};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use std::fmt;
use std::io;

/// Bytes of requests per `sendmsg`; well under the socket's send buffer (netlink refuses a
/// message larger than `sk_sndbuf`).
const CHUNK_BYTES: usize = 96 * 1024;
/// Asked for; the kernel caps it at `net.core.rmem_max` (doubled).
const RECV_BUFFER: usize = 8 * 1024 * 1024;
/// Room for the largest datagram a dump sends back.
const DATAGRAM: usize = 256 * 1024;
/// Worst-case bytes of one ACK with an extended error message, to keep the ACKs of one chunk
/// within the receive buffer.
const ACK_BYTES: usize = 160;

/// The kernel refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    pub errno: i32,
    pub message: Option<String>,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.errno))?;
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        Ok(())
    }
}

pub const ENOENT: i32 = 2;
pub const ESRCH: i32 = 3;
const EIO: i32 = 5;
pub const ENOBUFS: i32 = 105;

/// What became of a batch of requests.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Refused requests (index, error).
    pub failures: Vec<(usize, KernelError)>,
    /// Requests whose answer the kernel dropped (ENOBUFS on our socket): maybe applied.
    pub unanswered: Vec<usize>,
}

pub struct Kernel {
    socket: Socket,
    pid: u32,
    seq: u32,
    tx: Vec<u8>,
    rx: Vec<u8>,
    /// Requests per chunk, so that their ACKs fit the receive buffer.
    max_per_chunk: usize,
}

impl Kernel {
    pub fn open() -> io::Result<Kernel> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        let address = socket.bind_auto()?;
        // Errors carry the kernel's text; ACKs do not echo the request back.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        let _ = socket.set_rx_buf_sz(RECV_BUFFER);
        let rcvbuf = socket.get_rx_buf_sz().unwrap_or(200 * 1024);
        Ok(Kernel {
            socket,
            pid: address.port_number(),
            seq: 1,
            tx: Vec::with_capacity(CHUNK_BYTES + 4096),
            rx: Vec::with_capacity(DATAGRAM),
            max_per_chunk: (rcvbuf / 2 / ACK_BYTES).max(16),
        })
    }

    /// The port id the kernel gives our requests' notifications, to recognise our own echoes.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn next_seq(&mut self) -> u32 {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        seq
    }

    /// Sends `count` requests, `encode(index, seq, buffer)` appending request `index`, as few
    /// `sendmsg` calls as fit, and returns the requests that failed (index and error), matched
    /// by sequence number, and those whose answer was lost. Only the last request of each
    /// `sendmsg` asks for an ACK.
    pub fn execute(
        &mut self,
        count: usize,
        mut encode: impl FnMut(usize, u32, &mut Vec<u8>),
    ) -> Outcome {
        let mut failures = Vec::new();
        let mut unanswered = Vec::new();
        let mut next = 0;
        while next < count {
            self.tx.clear();
            let first_seq = self.seq;
            let start = next;
            let mut last_message = 0;
            while next < count && self.tx.len() < CHUNK_BYTES && next - start < self.max_per_chunk {
                let seq = self.next_seq();
                last_message = self.tx.len();
                encode(next, seq, &mut self.tx);
                next += 1;
            }
            msg::request_ack(&mut self.tx, last_message);
            let last_index = next - start - 1;
            if let Err(e) = self.socket.send(&self.tx, 0) {
                let errno = e.raw_os_error().unwrap_or(EIO);
                failures.extend((start..next).map(|i| (i, KernelError { errno, message: None })));
                continue;
            }
            // Failed requests answer with an error; the last one answers in any case, and
            // after all the others (the kernel handles one sendmsg in order). No error reply
            // before the last request's ACK means success.
            let mut answered = false;
            while !answered {
                self.rx.clear();
                match self.socket.recv(&mut self.rx, 0) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ENOBUFS: replies were dropped; what they said is unknown.
                    Err(_) => break,
                }
                for m in msg::messages(&self.rx) {
                    let Some(ack) = msg::parse_ack(&m) else { continue };
                    let index = ack.seq.wrapping_sub(first_seq) as usize;
                    if index > last_index {
                        continue;
                    }
                    if ack.errno != 0 {
                        let error = KernelError { errno: ack.errno, message: ack.message };
                        failures.push((start + index, error));
                    }
                    if index == last_index {
                        answered = true;
                    }
                }
            }
            if !answered {
                // What the unanswered requests did is unknown (the kernel processed them; only
                // its answers were dropped): the writer reads the kernel back.
                let reported: std::collections::HashSet<usize> =
                    failures.iter().map(|(i, _)| *i).collect();
                unanswered.extend((start..next).filter(|i| !reported.contains(i)));
            }
        }
        Outcome { failures, unanswered }
    }

    /// Dumps `kind` (RTM_GETLINK, RTM_GETROUTE, RTM_GETNEXTHOP) of `family`, calling `each`
    /// with every reply message.
    pub fn dump(
        &mut self,
        kind: u16,
        family: u8,
        mut each: impl FnMut(&Message<'_>),
    ) -> Result<(), KernelError> {
        let seq = self.next_seq();
        let mut buf = Vec::new();
        msg::dump(&mut buf, seq, kind, family);
        self.socket
            .send(&buf, 0)
            .map_err(|e| KernelError { errno: e.raw_os_error().unwrap_or(EIO), message: None })?;
        loop {
            self.rx.clear();
            match self.socket.recv(&mut self.rx, 0) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(KernelError {
                        errno: e.raw_os_error().unwrap_or(EIO),
                        message: None,
                    })
                }
            }
            for m in msg::messages(&self.rx) {
                if m.seq != seq {
                    continue;
                }
                match m.kind {
                    msg::NLMSG_DONE => return Ok(()),
                    msg::NLMSG_ERROR => {
                        if let Some(ack) = msg::parse_ack(&m) {
                            if ack.errno != 0 {
                                return Err(KernelError { errno: ack.errno, message: ack.message });
                            }
                        }
                        return Ok(());
                    }
                    _ => each(&m),
                }
            }
        }
    }
}

/// A socket subscribed to link, address, route and nexthop notifications.
pub struct Monitor {
    socket: Socket,
    rx: Vec<u8>,
}

impl Monitor {
    /// Subscribes, and has the kernel drop the echoes of `own_pid`'s requests before they are
    /// queued (see [`echo_filter`]).
    pub fn open(own_pid: u32) -> io::Result<Monitor> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        let _ = socket.set_rx_buf_sz(RECV_BUFFER);
        if let Err(e) = socket2::SockRef::from(&socket).attach_filter(&echo_filter(own_pid)) {
            // The monitor thread drops them itself; only the kernel's early drop is lost.
            tracing::warn!("cannot filter our own route notifications in the kernel: {e}");
        }
        for group in [
            msg::RTNLGRP_LINK,
            msg::RTNLGRP_IPV4_IFADDR,
            msg::RTNLGRP_IPV6_IFADDR,
            msg::RTNLGRP_IPV4_ROUTE,
            msg::RTNLGRP_IPV6_ROUTE,
            msg::RTNLGRP_NEXTHOP,
        ] {
            socket.add_membership(group)?;
        }
        Ok(Monitor { socket, rx: Vec::with_capacity(DATAGRAM) })
    }

    /// The next datagram of notifications; `Err` with ENOBUFS when some were lost.
    pub fn next_datagram(&mut self) -> io::Result<&[u8]> {
        loop {
            self.rx.clear();
            match self.socket.recv(&mut self.rx, 0) {
                Ok(_) => return Ok(&self.rx),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A socket filter that drops notifications whose `nlmsg_pid` is `own_pid`: the echoes of the
/// writer's own requests, one per route it writes. Dropped in the kernel, they are neither
/// queued nor copied nor read (perf: the monitor thread spent a sixth of a core reading and
/// discarding them during a million-route install), and a burst no longer overflows the
/// socket. A broadcast notification is one message per buffer, so the header is at offset 0.
fn echo_filter(own_pid: u32) -> [socket2::SockFilter; 4] {
    use socket2::SockFilter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
                             // A word load reads network byte order; the header's pid is in host order.
    let pid_as_loaded = u32::from_be_bytes(own_pid.to_ne_bytes());
    [
        SockFilter::new(LD_W_ABS, 0, 0, 12), // nlmsghdr.nlmsg_pid
        SockFilter::new(JEQ_K, 0, 1, pid_as_loaded),
        SockFilter::new(RET_K, 0, 0, 0),
        SockFilter::new(RET_K, 0, 0, u32::MAX),
    ]
}

/// `net.ipv4.nexthop_compat_mode` of our network namespace (it covers IPv6 too).
const NEXTHOP_COMPAT_MODE: &str = "/proc/sys/net/ipv4/nexthop_compat_mode";

/// Turns the kernel's nexthop compatibility mode off; returns whether it was on. In that mode
/// (the default) replacing or deleting a nexthop group makes the kernel send a route
/// notification for every route using it, and route dumps repeat every route's hops: a group
/// replaced for a lost next hop costs one notification per route, which is what nexthop
/// objects are meant to avoid (ip-sysctl.rst: "Once a system understands the new API, this
/// sysctl can be disabled"). The FIB writer is the one programmer of routes on the node and
/// understands the new API; `ip route` shows `nhid N` instead of the hops afterwards.
pub fn disable_nexthop_compat_mode() -> io::Result<bool> {
    let now = std::fs::read_to_string(NEXTHOP_COMPAT_MODE)?;
    if now.trim() == "0" {
        return Ok(false);
    }
    std::fs::write(NEXTHOP_COMPAT_MODE, "0")?;
    Ok(true)
}

pub fn is_overflow(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ENOBUFS)
}
